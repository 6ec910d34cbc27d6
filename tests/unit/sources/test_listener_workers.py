"""What a listener worker process is given: the oslo.config values of
[notifications] and of oslo.messaging's groups, rebuilt into a conf of its
own (the processes themselves are exercised on the real RabbitMQ in
functional/test_events_workers.py)."""

import pickle

from instanceha import conf as ha_conf
from instanceha.sources import listener_workers


def test_conf_values_survive_the_trip_to_a_worker():
    conf = ha_conf.make({"notifications": {
        "transport_url": "rabbit://u:secret@10.0.0.1:5672/nova",
        "pool": "ha-pool", "workers": 3, "topics": ["a", "b"],
        "batch_size": 7}})
    listener_workers.conf_values(conf)   # registers oslo.messaging's groups
    conf.set_override("rabbit_qos_prefetch_count", 9,
                      group="oslo_messaging_rabbit")
    conf.set_override("control_exchange", "cell1")
    values = pickle.loads(pickle.dumps(listener_workers.conf_values(conf)))
    rebuilt = listener_workers.conf_from_values(values)
    group = rebuilt.notifications
    assert group.transport_url == "rabbit://u:secret@10.0.0.1:5672/nova"
    assert (group.pool, group.workers, group.batch_size) == ("ha-pool", 3, 7)
    assert list(group.topics) == ["a", "b"]
    assert rebuilt.oslo_messaging_rabbit.rabbit_qos_prefetch_count == 9
    assert rebuilt.control_exchange == "cell1"


def test_a_bad_record_is_dropped_and_the_rest_applied():
    from instanceha.sources import notifications as nf
    applied = []
    workers = listener_workers.ListenerWorkers(
        ha_conf.make({"notifications": {"workers": 2}}), applied.append)
    good = nf.parse_message("info", "nova-api:ctl", "instance.create.end",
                            {}, None)
    assert not workers.connected()
    workers._deliver(workers._workers[1], [
        "junk", (listener_workers.STATUS, 1, None, None, True), good])
    assert applied == [good]
    assert workers.connected()
    assert [w["connected"] for w in workers.health()] == [False, True]
