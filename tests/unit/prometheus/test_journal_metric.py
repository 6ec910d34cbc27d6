"""instanceha_journal_reachable (what InstanceHAJournalUnreachable reads):
1 while the scrape's read of the journal succeeds, 0 while it fails, and
not exported without a journal."""

from prometheus_client.parser import text_string_to_metric_families

from instanceha.api.server import OperatorAPI
from tests.unit.test_engine import World


def _samples(api):
    text = api.handle("GET", "/metrics")[2].decode()
    return {s.name: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if not s.labels}


def test_follows_each_scrapes_read_of_the_journal():
    w = World()
    w.pass_()
    api = OperatorAPI(w.conf, w.engine, w.clock)
    assert _samples(api)["instanceha_journal_reachable"] == 1
    read = w.journal.evacuations_finished

    def unreachable(since):
        raise ConnectionError("journal database: connection refused")
    w.journal.evacuations_finished = unreachable
    m = _samples(api)
    assert m["instanceha_journal_reachable"] == 0
    # The rest of the scrape is still there.
    assert "instanceha_unprotected_hosts" in m
    w.journal.evacuations_finished = read
    assert _samples(api)["instanceha_journal_reachable"] == 1


class _NoJournal:
    def __init__(self, engine):
        self._engine = engine
        self.journal = None

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_no_journal_no_gauge():
    w = World()
    api = OperatorAPI(w.conf, _NoJournal(w.engine), w.clock)
    assert "instanceha_journal_reachable" not in _samples(api)
