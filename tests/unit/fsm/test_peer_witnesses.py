"""Peer witnesses in the state machine (issue 37, section 1): a host
silent to the engines on every path that a majority of its reporting
peers do not hear either is corroborated at once (no wait for Nova's
owed heartbeat) and fenced after peer_grace; a minority, a peer that
hears it, or fewer reporters than peer_witnesses leave it to Nova's
owed heartbeat. Times are given; nothing sleeps."""

from instanceha.events import AgentSilence, EventKind as E
from instanceha.fsm import agent, machine
from instanceha.fsm.states import Action as A, State as S
from tests.unit.fsm.test_agent import Host

# grace 10 s, peers' grace 2 s, Nova reports every 10 s.
P = machine.Policy(grace_period=10, nova_report_interval=10,
                   nova_seen_lag=3, peer_witnesses=2, peer_grace=2)


class PeerHost(Host):
    def silent(self, at, last_beat_at, unheard=0, heard=0, watching=0,
               kind=E.AGENT_SILENT):
        return self.step(kind, at, source="agent",
                         payload=AgentSilence(
                             last_beat_at=last_beat_at, paths=("mgmt",),
                             peers_unheard=unheard, peers_heard=heard,
                             peers_watching=watching))


def suspect(**word):
    h = PeerHost(P)
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    # Its last beat arrived at 5; the source says silent at 8.
    assert h.silent(8, last_beat_at=5, **word) is S.SUSPECT
    return h


def test_a_majority_of_peers_not_hearing_it_corroborates_at_once():
    h = suspect(unheard=3, watching=4)
    assert agent.corroborated(h.rec, h.p)
    # Due at the end of the peers' grace (2 s from its last beat: 7, so
    # at once), not at Nova's owed heartbeat (1 + 10 + 1 = 12) nor at
    # the end of the grace period (15).
    assert h.due() == 7
    assert not agent.wants_nova_read(h.rec, 12, h.p)
    assert h.tick(8.5) is S.FENCING and h.actions == [A.FENCE]
    assert "3 of the 4 agents watching it" in h.rec.reason


def test_the_word_may_come_later_the_grace_runs_from_the_last_beat():
    h = suspect()
    assert h.due() == 15 and h.tick(8.4) is S.SUSPECT
    # The word comes later, in the silence: 4 of 5 do not hear it.
    h.silent(8.5, last_beat_at=5, unheard=4, watching=5, kind=E.AGENT_PEERS)
    assert h.due() == 7 and h.tick(8.6) is S.FENCING
    # a longer peers' grace: due at 5 + 6
    slow = machine.Policy(grace_period=10, nova_report_interval=10,
                          nova_seen_lag=3, peer_witnesses=2, peer_grace=6)
    h = PeerHost(slow)
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    h.silent(8, last_beat_at=5, unheard=4, watching=5)
    assert h.due() == 11
    assert h.tick(10.9) is S.SUSPECT and h.tick(11) is S.FENCING


def test_a_minority_of_peers_does_not_corroborate():
    h = suspect(unheard=2, watching=5)
    assert not agent.corroborated(h.rec, h.p)
    assert h.due() == 15          # the full grace period, Nova owed at 12
    assert h.tick(12) is S.SUSPECT and h.tick(15) is S.SUSPECT


def test_one_peer_hearing_it_refutes_the_peers():
    h = suspect(unheard=3, heard=1, watching=4)
    assert not agent.peers_corroborate(h.rec, h.p)
    assert not agent.corroborated(h.rec, h.p)
    assert h.tick(9) is S.SUSPECT and h.tick(15) is S.SUSPECT
    # Nova's owed heartbeat, found missing by a read after it was owed,
    # still corroborates (the usual way).
    h.nova(15.2, updated_at=5000.0, read_at=15.1)
    assert h.tick(15.3) is S.FENCING


def test_fewer_reporters_than_peer_witnesses_needs_novas_owed_heartbeat():
    h = suspect(unheard=1, watching=1)     # a majority of 1, but 1 < 2
    assert not agent.corroborated(h.rec, h.p)
    assert h.due() == 15
    assert h.tick(15) is S.SUSPECT
    assert agent.wants_nova_read(h.rec, 15, h.p)
    h.nova(15.2, updated_at=5000.0, read_at=15.1)
    assert h.tick(15.3) is S.FENCING
    # with peer_witnesses = 1, the same lone peer would have done
    lone = machine.Policy(grace_period=10, nova_report_interval=10,
                          nova_seen_lag=3, peer_witnesses=1, peer_grace=2)
    h = PeerHost(lone)
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    h.silent(8, last_beat_at=5, unheard=1, watching=1)
    assert h.tick(8.1) is S.FENCING


def test_novas_heartbeat_after_the_silence_beats_the_peers():
    h = suspect(unheard=3, watching=3)
    # Nova recorded a heartbeat since (seen advancing well after the
    # silence): the host lives; the peers' word does not fence it.
    assert h.nova(9, updated_at=5010.0) is S.ACTIVE


def test_the_word_is_forgotten_when_the_agent_beats_again():
    h = suspect(unheard=1, watching=4)
    h.beating(8.5)
    assert (h.rec.peers_unheard, h.rec.peers_watching) == (0, 0)
    assert h.rec.agent == agent.BEATING


def test_the_peers_shorten_the_decision_never_skip_the_fencing():
    """Corroborated by peers, the host still goes through FENCING (a
    power-off or the watchdog's deadline) before any evacuation."""
    h = suspect(unheard=4, watching=4)
    assert h.tick(9) is S.FENCING and h.actions == [A.FENCE]
    assert A.EVACUATE not in h.actions and h.rec.fenced_at is None


def test_a_word_for_another_silence_or_a_beating_agent_changes_nothing():
    h = suspect()
    # a word about an earlier silence (another last beat) is not this one
    h.silent(8.5, last_beat_at=2, unheard=4, watching=4, kind=E.AGENT_PEERS)
    assert h.rec.peers_unheard == 0 and h.tick(9) is S.SUSPECT
    # an active host (Nova recorded a heartbeat since: refuted) is not
    # made suspect again by its peers' word
    assert h.nova(10, updated_at=5010.0) is S.ACTIVE
    assert h.silent(10.5, last_beat_at=5, unheard=4, watching=4,
                    kind=E.AGENT_PEERS) is S.ACTIVE
    h = PeerHost(P)
    h.beating(0)
    assert h.silent(1, last_beat_at=0, unheard=4, watching=4,
                    kind=E.AGENT_PEERS) is S.ACTIVE
    assert h.rec.peers_unheard == 0
