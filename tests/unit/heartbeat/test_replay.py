"""ReplayGuard: sequence, boots, learned clock offsets (a host 90 s off is
accepted; a recording is not), the strict mode for requests, memory."""

import pytest

from instanceha.heartbeat import protocol
from instanceha.heartbeat import replay


def test_reasons_are_drop_reasons():
    assert replay.REPLAYED in protocol.REPLAY_REASONS
    assert replay.STALE in protocol.REPLAY_REASONS


def test_sequence_must_increase_per_path():
    g = replay.ReplayGuard()
    assert g.check("h", "mgmt", "b1", 5, 100.0, 100.0) is None
    assert g.check("h", "mgmt", "b1", 5, 100.0, 100.0) == "replayed"
    assert g.check("h", "mgmt", "b1", 4, 101.0, 101.0) == "replayed"
    # Another path counts on its own.
    assert g.check("h", "storage", "b1", 1, 101.0, 101.0) is None
    assert g.check("h", "mgmt", "b1", 6, 101.0, 101.0) is None


def test_a_host_90_s_off_is_accepted_for_hours():
    g = replay.ReplayGuard(window=30.0)
    skew = -90.0                      # the host's clock is 90 s behind
    for i in range(1, 7200):
        now = 1000.0 + i
        assert g.check("h", "mgmt", "b1", i, now + skew, now) is None
    assert g.offset("h") == pytest.approx(90.0)


def test_a_host_ahead_by_90_s_is_accepted_too():
    g = replay.ReplayGuard(window=30.0)
    for i in range(1, 100):
        assert g.check("h", "p", "b1", i, 1090.0 + i, 1000.0 + i) is None


def test_a_recording_replayed_is_refused_by_seq():
    g = replay.ReplayGuard(window=30.0)
    recorded = [("h", "p", "b1", i, 1000.0 + i - 90, 1000.0 + i)
                for i in range(1, 11)]
    for beat in recorded:
        assert g.check(*beat) is None
    for host, path, boot, seq, sent_at, _ in recorded:
        assert g.check(host, path, boot, seq, sent_at, 2000.0) == "replayed"


def test_a_held_back_datagram_is_stale_despite_a_higher_seq():
    g = replay.ReplayGuard(window=30.0)
    assert g.check("h", "p", "b1", 1, 910.0, 1000.0) is None   # 90 s lag
    # seq 2 was sent at 911 but arrives 100 s later than it should.
    assert g.check("h", "p", "b1", 2, 911.0, 1101.0) == "stale"
    # A jitter within the window is fine.
    assert g.check("h", "p", "b1", 3, 912.0, 1020.0) is None


def test_a_new_boot_resets_the_sequence_and_relearns_the_offset():
    g = replay.ReplayGuard(window=30.0)
    assert g.check("h", "p", "b1", 900000, 1000.0, 1000.0) is None
    # Rebooted, its clock now 200 s ahead; seq starts low again.
    assert g.check("h", "p", "b2", 10, 1260.0, 1060.0) is None
    assert g.check("h", "p", "b2", 11, 1261.0, 1061.0) is None
    assert g.offset("h") == pytest.approx(-200.0)


def test_a_recording_of_an_old_boot_is_refused():
    g = replay.ReplayGuard(window=30.0)
    assert g.check("h", "p", "b1", 1, 1000.0, 1000.0) is None
    assert g.check("h", "p", "b2", 1, 1100.0, 1100.0) is None
    # b1 was replaced by b2: never again, whatever its numbers.
    assert g.check("h", "p", "b1", 99, 1101.0, 1101.0) == "replayed"
    # An old boot the guard never saw: its send time gives it away.
    assert g.check("h", "p", "b0", 99, 500.0, 1102.0) == "stale"
    assert g.check("h", "p", "b2", 2, 1103.0, 1103.0) is None


def test_the_first_datagram_is_trusted_whatever_its_clock():
    g = replay.ReplayGuard(window=30.0)
    assert g.check("h", "p", "b1", 1, 0.0, 1e9) is None
    assert g.check("h", "p", "b1", 2, 1.0, 1e9 + 1) is None


def test_strict_mode_compares_clocks_directly():
    g = replay.ReplayGuard(window=30.0, learn_offset=False)
    assert g.check("h", "control", "engine", 1, 910.0, 1000.0) == "stale"
    assert g.check("h", "control", "engine", 1, 990.0, 1000.0) is None
    assert g.check("h", "control", "engine", 1, 991.0, 1001.0) == "replayed"
    assert g.check("h", "control", "engine", 2, 950.0, 1001.0) == "stale"
    assert g.check("h", "control", "other", 3, 1000.0, 1060.0) == "stale"


def test_hosts_not_seen_for_long_are_forgotten():
    g = replay.ReplayGuard(forget_after=100.0)
    assert g.check("old", "p", "b", 1, 0.0, 0.0) is None
    assert g.check("new", "p", "b", 1, 50.0, 50.0) is None
    assert g.check("new", "p", "b", 2, 140.0, 140.0) is None
    assert len(g) == 1 and g.offset("old") is None
    # Forgotten: its next datagram is trusted on first use.
    assert g.check("old", "p", "b", 1, 141.0, 141.0) is None


def test_memory_is_capped_least_recently_seen_first():
    g = replay.ReplayGuard(max_hosts=3)
    for i, host in enumerate("abcd"):
        assert g.check(host, "p", "b", 1, float(i), float(i)) is None
    assert len(g) == 3 and g.offset("a") is None
    assert g.offset("d") is not None


def test_forget_drops_a_host():
    g = replay.ReplayGuard()
    g.check("h", "p", "b", 5, 0.0, 0.0)
    g.forget("h")
    assert g.check("h", "p", "b", 1, 0.0, 0.0) is None


def test_boot_ids_kept_are_bounded():
    g = replay.ReplayGuard(boots_kept=2)
    for i in range(5):
        assert g.check("h", "p", "b%d" % i, 1, 10.0 + i, 10.0 + i) is None
    assert g.check("h", "p", "b3", 9, 20.0, 20.0) == "replayed"
    # b0 is beyond what is kept; its send time still shows its age.
    assert g.check("h", "p", "b0", 9, 10.0, 200.0) == "stale"


@pytest.mark.parametrize("kwargs", [dict(window=0), dict(forget_after=-1),
                                    dict(max_hosts=0)])
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        replay.ReplayGuard(**kwargs)


def test_a_clock_stepped_within_a_boot_is_learned_after_a_run_of_beats():
    """An agent restarted after its host's clock stepped 90 s (same boot)
    sends a run of fresh beats with one new offset: refused as stale
    until RELEARN of them in a row, then accepted (a lost beat in the run
    is tolerated)."""
    g = replay.ReplayGuard(window=30.0)
    for i in range(1, 11):
        assert g.check("h", "p", "b1", i, 1000.0 + i, 1000.0 + i) is None
    # The clock jumps 90 s ahead; the sequence goes on.
    verdicts = [g.check("h", "p", "b1", seq, 1090.0 + seq, 1000.0 + seq)
                for seq in (12, 13, 15, 16, 17, 18)]     # 14 was lost
    assert verdicts == ["stale"] * (replay.RELEARN - 1) + [None, None]
    assert g.offset("h") == pytest.approx(-90.0)


def test_a_single_held_back_beat_among_fresh_ones_is_never_learned():
    g = replay.ReplayGuard(window=30.0)
    for i in range(1, 4):
        assert g.check("h", "p", "b1", i, 1000.0 + i, 1000.0 + i) is None
    # Held-back beats, each released 100 s late between fresh ones: each
    # is refused, and the fresh ones in between end every run.
    for i in range(4, 4 + 4 * replay.RELEARN, 2):
        assert g.check("h", "p", "b1", i, 1000.0 + i, 1100.0 + i) == "stale"
        assert g.check("h", "p", "b1", i + 1, 1100.0 + i,
                       1100.0 + i) is None
    assert g.offset("h") == pytest.approx(0.0)


def test_a_stepped_clock_is_learned_with_beats_on_two_paths():
    g = replay.ReplayGuard(window=30.0)
    for i in range(1, 5):
        for path in ("mgmt", "storage"):
            assert g.check("h", path, "b1", i, 1000.0 + i, 1000.0 + i) is None
    verdicts = []
    for i in range(5, 5 + replay.RELEARN):
        for path in ("mgmt", "storage"):
            verdicts.append(g.check("h", path, "b1", i, 1090.0 + i,
                                    1000.0 + i))
    assert None in verdicts and verdicts[-1] is None
    assert g.offset("h") == pytest.approx(-90.0)
