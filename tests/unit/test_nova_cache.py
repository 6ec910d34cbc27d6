"""The Nova driver's bounded-lifetime cache, on an injected clock."""

import threading

import pytest

from instanceha import conf as conf_pkg
from instanceha.drivers.compute.nova import NovaDriver, TTLCache
from instanceha.sim import SimCloud, SimServer


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Loader:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.calls


def test_value_kept_until_ttl():
    clock, load = Clock(), Loader()
    cache = TTLCache(60, clock)
    assert cache.get("k", load) == 1
    clock.t += 59.9
    assert cache.get("k", load) == 1
    clock.t += 0.1
    assert cache.get("k", load) == 2
    assert load.calls == 2


def test_ttl_zero_keeps_nothing():
    load = Loader()
    cache = TTLCache(0, Clock())
    assert [cache.get("k", load) for _ in range(3)] == [1, 2, 3]


def test_errors_are_not_kept():
    cache = TTLCache(60, Clock())

    def boom():
        raise RuntimeError("nova down")
    with pytest.raises(RuntimeError):
        cache.get("k", boom)
    assert cache.get("k", lambda: "ok") == "ok"


def test_invalidate_one_key_or_all():
    clock, load = Clock(), Loader()
    cache = TTLCache(60, clock)
    cache.get("a", load), cache.get("b", load)
    cache.invalidate("a")
    assert cache.get("a", load) == 3 and cache.get("b", load) == 2
    cache.invalidate()
    assert cache.get("b", load) == 4


def test_load_overlapping_an_invalidation_is_not_stored():
    # A read that started before our own write must not be kept after it.
    cache = TTLCache(60, Clock())

    def stale():
        cache.invalidate("k")       # our write lands while the read runs
        return "before"
    assert cache.get("k", stale) == "before"
    assert cache.get("k", lambda: "after") == "after"


def test_threads_share_one_value():
    cache = TTLCache(60, Clock())
    load = Loader()
    cache.get("k", load)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(
        cache.get("k", load))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1] * 16 and load.calls == 1


@pytest.fixture
def cloud(tmp_path):
    sim = SimCloud(hosts=2, servers_per_host=0,
                   aggregates={"rack": {"hosts": ["compute-0"]}})
    srv = SimServer(sim).start()
    clouds, _ = srv.write_client_files(str(tmp_path))
    yield sim, clouds
    srv.stop()


def driver(clouds, clock, ttl=60):
    conf = conf_pkg.make({"DEFAULT": {"cloud": "sim", "clouds_file": clouds,
                                      "nova_cache_ttl": ttl}})
    return NovaDriver(conf, clock=clock)


def test_driver_caches_aggregates_and_images(cloud):
    sim, clouds = cloud
    clock = Clock()
    nova = driver(clouds, clock)
    sim.set_aggregate_metadata("rack", {"a": "1"})
    image = sim.set_image(properties={"p": "1"})
    assert nova.list_aggregates()[0].metadata == {"a": "1"}
    assert nova.get_image(image)["p"] == "1"
    # An operator's change behind our back: seen after the TTL.
    sim.set_aggregate_metadata("rack", {"a": "2", "b": "x"})
    sim.set_image(image, properties={"p": "2"})
    assert nova.list_aggregates()[0].metadata == {"a": "1"}
    assert nova.get_image(image)["p"] == "1"
    clock.t += 60
    assert nova.list_aggregates()[0].metadata == {"a": "2", "b": "x"}
    assert nova.get_image(image)["p"] == "2"
    # Our own write: seen at once.
    nova.unset_aggregate_metadata(nova.list_aggregates()[0].id, "b")
    assert nova.list_aggregates()[0].metadata == {"a": "2"}


def test_driver_without_cache_reads_every_time(cloud):
    sim, clouds = cloud
    nova = driver(clouds, Clock(), ttl=0)
    sim.set_aggregate_metadata("rack", {"a": "1"})
    assert nova.list_aggregates()[0].metadata == {"a": "1"}
    sim.set_aggregate_metadata("rack", {"a": "2"})
    assert nova.list_aggregates()[0].metadata == {"a": "2"}
