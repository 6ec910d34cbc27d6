"""The drain preflight and plan (instanceha.policy.drain): pure, no clock.

Every ``how``, every refusal kind, the capacity summary per zone, the HA
admission with its numbers, force, and the facts the plan reads.
"""

import json
import random

import pytest

from instanceha.drivers.compute.base import (Aggregate, ComputeService,
                                             HostCapacity, Server)
from instanceha.policy import capacity_need, drain, order
from instanceha.policy.capacity_need import Need
from instanceha.policy.drain_servers import classify, need_for
from instanceha.policy.facts import (AggregateFacts, FlavorFacts, HostFacts,
                                     ImageFacts, ServerFacts)
from instanceha.policy.facts_nova import host_facts, server_from_nova

GB = 1024
SOURCE = "c1"


def srv(sid, name=None, status="ACTIVE", vcpus=2, ram=4 * GB, disk=20,
        zone="az1", tags=(), metadata=None, task=None, vm=None, specs=None,
        image_props=None, flavor=True, volume=False):
    fl = FlavorFacts(id="f-" + sid, name="m1", vcpus=vcpus, ram_mb=ram,
                     disk_gb=disk, extra_specs=dict(specs or {})) \
        if flavor else None
    img = None if volume else ImageFacts(id="img", name="cirros",
                                         properties=dict(image_props or {}))
    return ServerFacts(id=sid, name=name or sid, host=SOURCE,
                       metadata=dict(metadata or {}), tags=tuple(tags),
                       image=img, flavor=fl, status=status, vm_state=vm,
                       task_state=task, zone=zone)


def host(name, zone="az1", vcpus=32, vcpus_used=0, ram=64 * GB, ram_used=0,
         disk=1000, disk_used=0, enabled=True, up=True, forced_down=False,
         capacity=True):
    cap = HostCapacity(name, vcpus, vcpus_used, ram, ram_used, disk,
                       disk_used) if capacity else None
    return HostFacts(name, zone=zone, enabled=enabled, up=up,
                     forced_down=forced_down, capacity=cap)


def svc(name, binary="nova-compute", state="up", status="enabled",
        forced_down=False, zone="az1"):
    return ComputeService("id-%s-%s" % (name, binary), name, state, status,
                          forced_down, None, None, zone=zone, binary=binary)


def control(conductor="up", scheduler="up"):
    return [svc("ctl-1", "nova-conductor", state=conductor, zone=None),
            svc("ctl-1", "nova-scheduler", state=scheduler, zone=None)]


def cloud(n=4, **kw):
    """n hosts c1..cn in az1 (c1 the one drained), and their services."""
    hosts = [host("c%d" % i, **kw) for i in range(1, n + 1)]
    services = control() + [svc(h.host, status="disabled" if
                                h.host == SOURCE else "enabled")
                            for h in hosts]
    return hosts, services


def plan(servers, hosts=None, services=None, force=False, **settings):
    if hosts is None:
        hosts, default_services = cloud()
        services = default_services if services is None else services
    elif services is None:
        services = control() + [svc(h.host, zone=h.zone) for h in hosts]
    return drain.plan(SOURCE, servers, hosts, services,
                      drain.Settings(**settings), force=force)


def kinds(p):
    return [r.kind for r in p.reasons]


# -- every how ----------------------------------------------------------------

def test_every_how_in_its_order():
    servers = [
        srv("e", "err", status="ERROR", vm="error"),
        srv("s", "stopped", status="SHUTOFF", vm="stopped"),
        srv("a", "web", status="ACTIVE"),
        srv("p", "paused", status="PAUSED", vm="paused"),
        srv("m", "moving", status="MIGRATING", task="migrating"),
        srv("r", "resizing", status="RESIZE", task="resize_migrating"),
        srv("v", "verify", status="VERIFY_RESIZE", vm="resized"),
        srv("k", "snap", status="ACTIVE", task="image_snapshot"),
    ]
    p = plan(servers)
    assert p.ok and p.proceed, p.refusals
    assert [(s.server_id, s.how) for s in p.steps] == [
        ("v", "confirm"),
        ("m", "wait"), ("r", "wait"), ("k", "wait"),
        ("p", "live"), ("s", "cold"), ("a", "live"),
        ("e", "defer")]
    assert p.steps[0] == ("v", "verify", "confirm")
    assert "deferred to the end and reported" in p.servers["e"].reason
    assert "resizing" in p.servers["r"].reason
    assert "migrating" in p.servers["m"].reason
    assert "task image_snapshot" in p.servers["k"].reason
    assert [s.server_id for s in p.drainable] == ["v", "m", "r", "k", "p",
                                                  "s", "a"]
    assert [s.server_id for s in p.left] == ["e"]
    assert p.text == ("drain c1: 8 server(s) (1 confirm, 3 wait, 2 live, "
                      "1 cold, 1 defer); preflight passed")


def test_shutoff_leave_is_reported_not_refused_nor_counted():
    p = plan([srv("s", status="SHUTOFF", ram=60 * GB)], shutoff="leave")
    assert p.ok
    assert p.steps == (("s", "s", "leave"),)
    assert "shutoff = leave" in p.servers["s"].reason
    assert p.servers["s"].need is None
    assert p.capacity[0].needed == Need()


def test_status_missing_the_vm_state_decides():
    assert classify(srv("x", status=None, vm="stopped")).how == "cold"
    assert classify(srv("x", status=None, vm="active")).how == "live"
    assert classify(srv("x", status=None, vm="resized")).how == "confirm"
    assert classify(srv("x", status="active")).how == "live"


def test_verify_resize_being_confirmed_is_waited_for():
    v = classify(srv("x", status="VERIFY_RESIZE", vm="resized",
                     task="resize_confirming"))
    assert v.how == "wait"


# -- order --------------------------------------------------------------------

def test_priority_then_name_error_last_whatever_its_priority():
    key = order.DEFAULT_PRIORITY_KEY
    servers = [
        srv("1", "bravo"), srv("2", "alpha"),
        srv("3", "zulu", metadata={key: "10"}),
        srv("4", "yankee", status="SHUTOFF", metadata={key: "5"}),
        srv("5", "broken", status="ERROR", metadata={key: "99"}),
        srv("6", "charlie", metadata={key: "high"}),
    ]
    p = plan(servers)
    assert [s.name for s in p.steps] == [
        "zulu", "yankee", "alpha", "bravo", "charlie", "broken"]
    assert p.servers["3"].priority == 10
    assert len(p.problems) == 1 and "high" in p.problems[0].message


def test_order_is_deterministic_whatever_the_input_order():
    servers = [srv(str(i), "s%02d" % (i % 7)) for i in range(20)]
    first = plan(servers)
    rnd = random.Random(4)
    for _ in range(5):
        shuffled = list(servers)
        rnd.shuffle(shuffled)
        assert plan(shuffled) == first
    # same name: by id
    assert [s.server_id for s in first.steps][:3] == ["0", "14", "7"]


def test_priority_from_the_flavor_when_configured():
    key = order.DEFAULT_PRIORITY_KEY
    a = srv("a", "a")
    b = srv("b", "b", specs={key: "3"})
    p = plan([a, b], priority=order.Settings(sources=("server", "flavor")))
    assert [s.server_id for s in p.steps] == ["b", "a"]


# -- refusals: servers ----------------------------------------------------------

def test_opt_out_tag_and_metadata():
    tag = "instanceha:no-drain"
    p = plan([srv("t", "tagged", tags=(tag,)),
              srv("m", "meta", metadata={tag: "True"}),
              srv("f", "free", metadata={tag: "false"}),
              srv("x", "typo", metadata={tag: "yes"})])
    assert not p.ok
    assert [(s.server_id, s.how) for s in p.steps] == [
        ("f", "live"), ("m", "leave"), ("t", "leave"), ("x", "leave")]
    assert kinds(p) == ["opt_out"] * 3
    assert p.refusals[0] == ("server meta (m) has metadata "
                             "instanceha:no-drain=True (the drain's opt-out)")
    assert "server tagged (t) has the tag instanceha:no-drain" in \
        p.refusals[1]
    assert "'yes'" in p.refusals[2]
    assert any("neither true nor false" in pr.message for pr in p.problems)
    # opted-out servers take no room
    assert p.capacity[0].servers == ("f",)


def test_opt_out_tag_is_configurable():
    p = plan([srv("t", tags=("pinned-here",))], opt_out_tag="pinned-here")
    assert kinds(p) == ["opt_out"]
    assert plan([srv("t", tags=("pinned-here",))]).ok


@pytest.mark.parametrize("specs,props,words", [
    ({"pci_passthrough:alias": "a1:2"}, {},
     "flavor m1 asks for PCI passthrough (pci_passthrough:alias=a1:2)"),
    ({"resources:VGPU": "1"}, {},
     "flavor m1 asks for a vGPU (resources:VGPU=1)"),
    ({"resources1:VGPU": "1"}, {}, "a vGPU (resources1:VGPU=1)"),
    ({"accel:device_profile": "fpga"}, {},
     "an accelerator (accel:device_profile=fpga)"),
    ({"hw:tpm_version": "2.0"}, {}, "a vTPM (hw:tpm_version=2.0)"),
    ({}, {"hw_tpm_model": "tpm-crb"},
     "image cirros asks for a vTPM (hw_tpm_model=tpm-crb)"),
])
def test_not_live_migratable(specs, props, words):
    p = plan([srv("g", "gpu", specs=specs, image_props=props)])
    assert kinds(p) == ["not_live_migratable"]
    assert p.steps == (("g", "gpu", "leave"),)
    assert p.refusals[0].startswith(
        "server gpu (g) is ACTIVE but cannot be live-migrated: ")
    assert words in p.refusals[0]


def test_live_blockers_configurable_and_zero_values_ignored():
    vtpm = srv("t", specs={"hw:tpm_version": "2.0"})
    assert plan([vtpm], live_blockers=("pci", "vgpu")).ok
    assert plan([srv("z", specs={"resources:VGPU": "0"})]).ok


def test_stopped_server_with_pci_is_cold_migrated():
    p = plan([srv("s", status="SHUTOFF",
                  specs={"pci_passthrough:alias": "a1:1"})])
    assert p.ok and p.steps == (("s", "s", "cold"),)


@pytest.mark.parametrize("status", ["SUSPENDED", "RESCUE", "SHELVED",
                                    "SOFT_DELETED", "UNKNOWN"])
def test_states_nova_refuses(status):
    p = plan([srv("x", "vm", status=status)])
    assert kinds(p) == ["state"]
    assert p.refusals == ("server vm (x) is %s: Nova moves it neither live "
                          "nor cold" % status,)
    assert p.steps == (("x", "vm", "leave"),)


def test_unknown_state_is_refused():
    p = plan([srv("x", "vm", status=None)])
    assert p.refusals == ("server vm (x) is in an unknown state: Nova moves "
                          "it neither live nor cold",)


# -- refusals: services and destinations --------------------------------------

def test_control_services_down_are_hard_refusals():
    hosts, services = cloud()
    services = [s for s in services if s.binary != "nova-conductor"] + [
        svc("ctl-1", "nova-conductor", state="down", zone=None),
        svc("ctl-2", "nova-conductor", forced_down=True, zone=None)]
    services = [s for s in services if s.binary != "nova-scheduler"]
    p = plan([srv("a")], hosts, services, force=True)
    assert p.refusals[:2] == (
        "nova-conductor: 0 of 2 service(s) up (ctl-1 down (state down), "
        "ctl-2 forced down); Nova cannot migrate without one",
        "nova-scheduler: no service known; Nova cannot migrate without one")
    assert all(r.hard for r in p.reasons) and not p.proceed
    assert p.text.endswith("preflight refused (2 reason(s))")


def test_source_compute_down_refuses_only_with_something_to_move():
    hosts, services = cloud()
    services = [s for s in services if s.host != SOURCE] + [
        svc(SOURCE, state="down", status="disabled")]
    p = plan([srv("a")], hosts, services, force=True)
    assert p.refusals == ("nova-compute on c1 is down (state down); Nova "
                          "migrates only from a running compute service",)
    assert p.reasons[0].hard and not p.proceed
    # nothing to move (only an ERROR server): nothing refused
    assert plan([srv("e", status="ERROR")], hosts, services).ok
    services = [s for s in services if s.host != SOURCE]
    assert "nova-compute on c1: no service known" in \
        plan([srv("a")], hosts, services).refusals[0]


def test_no_destination_names_every_host_and_why():
    hosts = [host("c1"), host("c2", enabled=False), host("c3", up=False),
             host("c4", forced_down=True), host("c5", capacity=False)]
    services = control() + [svc(h.host) for h in hosts] + [svc("c6")]
    p = plan([srv("a")], hosts, services, force=True)
    assert p.refusals[0] == (
        "no destination host for c1: 0 of 5 other compute host(s) are "
        "enabled, up and of known capacity (c2 disabled, c3 not up, c4 "
        "forced down, c5 no capacity known, c6 no capacity known)")
    assert p.reasons[0].kind == "destination" and not p.proceed


def test_service_records_of_a_destination_count_too():
    hosts, services = cloud(3)
    services = [s for s in services if s.host != "c2"] + [
        svc("c2", state="down")]
    p = plan([srv("a")], hosts, services)
    assert p.destinations == ("c3",)
    assert p.skipped_hosts == {"c2": "down (state down)"}


# -- capacity -------------------------------------------------------------------

def test_capacity_summary_needed_vs_free():
    hosts, services = cloud(3, ram_used=32 * GB, vcpus_used=8, disk_used=100)
    p = plan([srv("a", vcpus=4, ram=8 * GB, disk=40),
              srv("b", vcpus=2, ram=4 * GB, disk=0, volume=True)],
             hosts, services, ha_reserve_hosts=0)
    assert p.ok
    (room,) = p.capacity
    assert room.zone == "az1" and room.hosts == ("c2", "c3")
    assert room.needed == Need(6, 12 * GB, 40)
    assert room.free == Need(48, 64 * GB, 1800)
    assert room.text == ("zone az1: 2 server(s) need 6 vCPU, 12288 MB RAM, "
                         "40 GB disk; 2 host(s) have 48 vCPU, 65536 MB RAM, "
                         "1800 GB disk free")


def test_a_server_no_host_has_room_for_and_the_zone_shortfall():
    hosts, services = cloud(3, ram_used=56 * GB)      # 8 GB free on each
    p = plan([srv("big", "db", ram=12 * GB), srv("s1", ram=6 * GB),
              srv("s2", ram=6 * GB), srv("s3", ram=6 * GB)], hosts, services,
             ha_reserve_hosts=0)
    assert kinds(p) == ["capacity"] * 3
    assert p.refusals[0] == (
        "server db: needs 2 vCPU, 12288 MB RAM, 20 GB disk; no destination "
        "has 12288 MB RAM free in zone az1")
    assert p.refusals[1] == (
        "server s3: needs 2 vCPU, 6144 MB RAM, 20 GB disk; no destination "
        "has 6144 MB RAM free in zone az1")
    assert p.refusals[2] == (
        "zone az1: 4 server(s) need 8 vCPU, 30720 MB RAM, 80 GB disk; 2 "
        "host(s) have 64 vCPU, 16384 MB RAM, 2000 GB disk free: short of "
        "14336 MB RAM")
    assert p.capacity[0].pending.keys() == {"big", "s3"}
    # soft: forced, the drain goes with what it can
    forced = plan([srv("big", "db", ram=12 * GB)], hosts, services,
                  ha_reserve_hosts=0, force=True)
    assert not forced.ok and forced.proceed
    assert forced.drainable == (("big", "db", "live"),)


def test_fragmented_capacity_is_refused_without_shortfall():
    hosts, services = cloud(3, ram_used=58 * GB)      # 6 GB free on each
    p = plan([srv("a", ram=8 * GB)], hosts, services, ha_reserve_hosts=0)
    assert p.refusals == ("server a: needs 2 vCPU, 8192 MB RAM, 20 GB "
                          "disk; no destination has 8192 MB RAM free in "
                          "zone az1",)
    assert not p.capacity[0].shortfall
    assert "1 server(s) fit on no single host" in p.capacity[0].text


def test_hosts_without_disk_are_not_held_to_it():
    hosts = [host("c1"), host("c2", disk=0), host("c3", disk=0)]
    p = plan([srv("a", disk=500)], hosts, ha_reserve_hosts=1)
    assert p.ok, p.refusals
    assert not p.capacity[0].disk_checked
    assert "disk unchecked" in p.capacity[0].text
    assert not p.admission.checks[0].disk_checked


def test_unknown_size_is_noted_not_counted():
    p = plan([srv("a", flavor=False),
              srv("p", specs={"hw:cpu_policy": "dedicated"})])
    assert p.ok
    assert p.notes == ("server a: size unknown, not counted in capacity or "
                       "admission", "server p: size unknown, not counted in "
                       "capacity or admission")
    assert len(p.problems) == 2
    assert p.capacity[0].needed == Need()


def test_confirm_is_counted_wait_is_not():
    p = plan([srv("v", status="VERIFY_RESIZE", ram=8 * GB),
              srv("m", status="MIGRATING", task="migrating", ram=16 * GB)])
    assert p.capacity[0].needed.ram_mb == 8 * GB


# -- zones ----------------------------------------------------------------------

def test_servers_of_a_zone_count_only_hosts_of_that_zone():
    hosts = [host("c1", zone="az1"), host("c2", zone="az1", ram_used=60 * GB),
             host("c3", zone="az2"), host("c4", zone="az2")]
    services = control() + [svc(h.host, zone=h.zone) for h in hosts]
    p = plan([srv("a", "web", ram=8 * GB, zone="az1")], hosts, services,
             ha_reserve_hosts=0)
    assert p.refusals[0] == ("server web: needs 2 vCPU, 8192 MB RAM, 20 GB "
                             "disk; no destination has 8192 MB RAM free in "
                             "zone az1")
    assert p.zone == "az1"
    # not pinned: any zone's host will do
    p = plan([srv("a", "web", ram=8 * GB, zone=None)], hosts, services,
             ha_reserve_hosts=0)
    assert p.ok
    assert [r.zone for r in p.capacity] == ["az1", None]
    assert p.capacity[1].hosts == ("c2", "c3", "c4")


def test_zones_split_on_paper_each_with_its_own_hosts():
    hosts = [host("c1", zone="az1"),
             host("c2", zone="az1", ram=16 * GB),
             host("c3", zone="az2", ram=16 * GB),
             host("c4", zone=None, ram=64 * GB)]
    services = control() + [svc(h.host, zone=h.zone) for h in hosts]
    servers = [srv("a1", ram=12 * GB, zone="az1"),
               srv("a2", ram=12 * GB, zone="az2"),
               srv("u", ram=40 * GB, zone=None),
               srv("a3", ram=8 * GB, zone="az2")]
    p = plan(servers, hosts, services, ha_reserve_hosts=0)
    rooms = {r.zone: r for r in p.capacity}
    assert set(rooms) == {"az1", "az2", None}
    assert rooms["az1"].hosts == ("c2",) and rooms["az1"].fits
    assert rooms["az2"].pending.keys() == {"a3"}
    assert rooms["az2"].shortfall == Need(0, 4 * GB, 0)
    # the unpinned server sees what the zones left: c4's 64 GB
    assert rooms[None].fits and rooms[None].free.ram_mb == 72 * GB
    assert kinds(p) == ["capacity", "capacity"]


def test_server_pinned_to_a_zone_without_hosts():
    p = plan([srv("a", zone="az9")], ha_reserve_hosts=1)
    assert "no destination host in zone az9" in p.refusals[0]
    assert any("HA admission in zone az9: 0 host(s) would be left (none)"
               in r for r in p.refusals)


# -- HA admission ---------------------------------------------------------------

def test_admission_four_hosts_of_64_gb_rest_absorbs_the_largest():
    # c2..c4 use 30 GB each; the drain brings 30 GB: 120 GB of 192 GB, and
    # 128 GB remain without the largest host: admitted.
    hosts, services = cloud(4, ram_used=30 * GB)
    servers = [srv("s%d" % i, ram=10 * GB) for i in range(3)]
    p = plan(servers, hosts, services)
    assert p.ok, p.refusals
    (check,) = p.admission.checks
    assert check.zone == "az1" and check.hosts == ("c2", "c3", "c4")
    assert check.capacity.ram_mb == 192 * GB
    assert check.reserve.ram_mb == 64 * GB
    assert check.load.ram_mb == 120 * GB
    assert check.largest["ram"] == ("c2",)
    assert p.admission.text == (
        "zone az1: 3 host(s) absorb the loss of their largest 1: 6 of 64 "
        "vCPU, 122880 of 131072 MB RAM, 60 of 2000 GB disk")


def test_admission_four_hosts_of_64_gb_refused_with_its_numbers():
    # 40 GB used on each, 40 GB brought: 160 GB > 128 GB.
    hosts, services = cloud(4, ram_used=40 * GB)
    servers = [srv("s%d" % i, ram=10 * GB) for i in range(4)]
    p = plan(servers, hosts, services)
    assert kinds(p) == ["admission"]
    assert p.refusals == (
        "HA admission in zone az1: after the drain 3 host(s) would use "
        "163840 of 196608 MB RAM; without the largest 1 (c2: 65536) 131072 "
        "remain, short of 32768 MB RAM",)
    assert not p.admission.ok
    assert plan(servers, hosts, services, force=True).proceed
    assert plan(servers, hosts, services, ha_reserve_hosts=0).ok


def test_admission_with_two_hosts_in_reserve_and_too_few_hosts():
    hosts, services = cloud(4, ram_used=10 * GB)
    p = plan([srv("a")], hosts, services, ha_reserve_hosts=2)
    (check,) = p.admission.checks
    assert check.ok and check.reserve.ram_mb == 128 * GB
    assert check.largest["ram"] == ("c2", "c3")
    p = plan([srv("a")], hosts, services, ha_reserve_hosts=3)
    assert p.refusals == ("HA admission in zone az1: 3 host(s) would be "
                          "left (c2, c3, c4), which cannot absorb the loss "
                          "of 3",)


def test_admission_largest_is_per_resource():
    hosts = [host("c1"), host("big-ram", vcpus=16, ram=256 * GB),
             host("big-cpu", vcpus=128, ram=32 * GB),
             host("small", vcpus=16, ram=32 * GB)]
    p = plan([srv("a")], hosts)
    (check,) = p.admission.checks
    assert check.largest["ram"] == ("big-ram",)
    assert check.largest["vcpus"] == ("big-cpu",)
    # 64 GB left without big-ram, 32 vCPU without big-cpu
    assert check.capacity.ram_mb - check.reserve.ram_mb == 64 * GB
    assert check.capacity.vcpus - check.reserve.vcpus == 32
    assert "vCPU" in p.admission.text


def test_admission_of_an_empty_host_still_counts_the_host_taken_out():
    # 3 hosts left of 64 GB using 50 GB each: 150 GB > 128 GB
    hosts, services = cloud(4, ram_used=50 * GB)
    p = plan([], hosts, services)
    assert p.steps == () and p.capacity[0].servers == ()
    assert kinds(p) == ["admission"]
    assert "would use 153600 of 196608 MB RAM" in p.refusals[0]


def test_admission_cloud_wide_for_unpinned_servers():
    hosts = [host("c1", zone="az1"), host("c2", zone="az1"),
             host("c3", zone="az2"), host("c4", zone="az2")]
    services = control() + [svc(h.host, zone=h.zone) for h in hosts]
    p = plan([srv("u", zone=None, ram=8 * GB)], hosts, services)
    zones = [c.zone for c in p.admission.checks]
    assert zones == ["az1", None]
    az1, whole = p.admission.checks
    # az1 keeps only c2: one host cannot absorb its own loss
    assert not az1.ok and whole.ok
    assert whole.hosts == ("c2", "c3", "c4")
    assert whole.load.ram_mb == 8 * GB and az1.load.ram_mb == 0
    assert p.refusals == ("HA admission in zone az1: 1 host(s) would be "
                          "left (c2), which cannot absorb the loss of 1",)


def test_admission_off():
    p = plan([srv("a")], ha_reserve_hosts=0)
    assert p.admission.ok and p.admission.checks == ()
    assert "off" in p.admission.text


# -- force ------------------------------------------------------------------------

def test_force_drains_what_can_be_drained():
    hosts, services = cloud(4, ram_used=40 * GB)
    servers = [srv("a", "web", ram=20 * GB),
               srv("g", "gpu", specs={"pci_passthrough:alias": "a1:1"}),
               srv("o", "kept", tags=("instanceha:no-drain",)),
               srv("z", "susp", status="SUSPENDED"),
               srv("e", "err", status="ERROR")]
    p = plan(servers, hosts, services)
    assert not p.ok and not p.proceed and not p.force
    assert kinds(p) == ["opt_out", "not_live_migratable", "state",
                        "admission"]
    f = plan(servers, hosts, services, force=True)
    assert f.force and f.proceed and not f.ok
    assert f.refusals == p.refusals and f.steps == p.steps
    assert f.drainable == (("a", "web", "live"),)
    assert [s.server_id for s in f.left] == ["g", "o", "z", "e"]
    assert f.hard == ()
    assert f.text.endswith("preflight refused (4 reason(s)), forced")


# -- facts ---------------------------------------------------------------------------

def nova_body(**over):
    body = {
        "id": "5f0c", "name": "web-1", "status": "ACTIVE",
        "OS-EXT-STS:vm_state": "active", "OS-EXT-STS:task_state": None,
        "OS-EXT-SRV-ATTR:host": "c1",
        "OS-EXT-AZ:availability_zone": "az1",
        "image": {"id": "img"}, "tags": ["instanceha:no-drain"],
        "flavor": {"original_name": "m1", "vcpus": 2, "ram": 4096,
                   "disk": 20, "ephemeral": 5, "swap": 1536,
                   "extra_specs": {"pci_passthrough:alias": "a1:1"}}}
    body.update(over)
    return body


def test_server_from_nova_reads_what_the_drain_needs():
    s = server_from_nova(nova_body())
    assert (s.status, s.vm_state, s.task_state, s.zone) == (
        "ACTIVE", "active", None, "az1")
    assert (s.flavor.vcpus, s.flavor.ram_mb, s.flavor.disk_gb,
            s.flavor.ephemeral_gb, s.flavor.swap_mb) == (2, 4096, 20, 5,
                                                          1536)
    # the same size as the capacity preflight reads from the body
    assert need_for(s) == capacity_need.need_of(nova_body())
    assert need_for(s)[0] == Need(2, 4096, 27)
    volume = nova_body(image="")
    assert need_for(server_from_nova(volume)) == \
        capacity_need.need_of(volume)
    v = classify(s)
    assert v.how == "leave" and v.kind == "opt_out"


def test_server_zone_pinned_from_2_96():
    assert server_from_nova(nova_body(
        pinned_availability_zone="az2")).zone == "az2"
    assert server_from_nova(nova_body(
        pinned_availability_zone=None)).zone is None
    assert server_from_nova(nova_body(
        **{"OS-EXT-AZ:availability_zone": ""})).zone is None


def test_host_facts_from_the_drivers_records():
    caps = {"c2": HostCapacity("c2", 8, 1, 1024, 512, 10, 1)}
    services = [svc("c2", zone="az1"), svc("c2", state="down", zone="az2"),
                svc("c3", status="disabled", forced_down=True),
                svc("ctl", "nova-scheduler")]
    aggs = [Aggregate("fast", ("c2",), zone="az1"),
            AggregateFacts("gold", "9", {"k": "v"}, ("c2", "c3"))]
    hf = host_facts(caps, services, aggs)
    assert list(hf) == ["c2", "c3"]
    c2, c3 = hf["c2"], hf["c3"]
    assert (c2.enabled, c2.up, c2.forced_down, c2.zone) == (
        True, False, False, None)
    assert c2.capacity is caps["c2"]
    assert [a.name for a in c2.aggregates] == ["fast", "gold"]
    assert (c3.enabled, c3.up, c3.forced_down, c3.zone) == (
        False, True, True, "az1")
    assert c3.capacity is None


def test_plan_from_host_facts_end_to_end():
    caps = {h: HostCapacity(h, 32, 0, 64 * GB, 0, 1000, 0)
            for h in ("c1", "c2", "c3")}
    services = control() + [svc("c1", status="disabled"), svc("c2"),
                            svc("c3")]
    p = drain.plan("c1", [server_from_nova(nova_body(tags=[]))],
                   host_facts(caps, services), services, drain.Settings())
    assert p.destinations == ("c2", "c3")
    assert p.refusals == (
        "server web-1 (5f0c) is ACTIVE but cannot be live-migrated: flavor "
        "m1 asks for PCI passthrough (pci_passthrough:alias=a1:1)",)


def test_plan_input_checks_and_other_hosts_servers():
    with pytest.raises(TypeError):
        drain.plan("c1", [], [object()], [], drain.Settings())
    with pytest.raises(ValueError):
        drain.plan("c1", [], [host("c2"), host("c2")], [], drain.Settings())
    other = ServerFacts(id="o", name="other", host="c9", status="ACTIVE")
    p = plan([srv("a"), srv("a"), other])
    assert [s.server_id for s in p.steps] == ["a"]
    assert p.notes == ("server other is on c9, not c1: ignored",)


# -- settings ----------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    {"shutoff": "delete"}, {"stuck_action": "kill"},
    {"opt_out_tag": "a/b"}, {"opt_out_tag": " x"}, {"opt_out_tag": ""},
    {"opt_out_tag": "x" * 61}, {"concurrency": 0}, {"max_concurrent": 0},
    {"ha_reserve_hosts": -1}, {"stuck_timeout": 0}, {"stuck_retries": -1},
    {"concurrency": True}, {"live_blockers": ("sriov",)},
    {"poll_interval": 0},
])
def test_settings_refuse_bad_values(kw):
    with pytest.raises(ValueError):
        drain.Settings(**kw)


def test_settings_from_conf():
    from instanceha import conf as conf_pkg
    from instanceha.conf import drain as drain_conf
    conf = conf_pkg.make({"drain": {
        "concurrency": 3, "max_concurrent": 5, "shutoff": "leave",
        "opt_out_tag": "stay", "ha_reserve_hosts": 2, "stuck_timeout": 60,
        "stuck_action": "force_complete", "stuck_retries": 1,
        "live_blockers": ["vtpm", "pci"]},
        "recovery": {"priority_key": "prio"}})
    s = drain.Settings.from_conf(conf)
    assert s == drain.Settings(
        concurrency=3, max_concurrent=5, shutoff="leave", opt_out_tag="stay",
        ha_reserve_hosts=2, stuck_timeout=60, stuck_action="force_complete",
        stuck_retries=1, live_blockers=("pci", "vtpm"), poll_interval=5,
        priority=order.Settings(key="prio"))
    defaults = drain.Settings.from_conf(conf_pkg.make())
    assert defaults == drain.Settings()
    drain_conf.validate(conf)
    bad = conf_pkg.make({"drain": {"opt_out_tag": "a,b"}})
    with pytest.raises(Exception, match="opt_out_tag"):
        drain_conf.validate(bad)


# -- what the engine and the API hand over ------------------------------------

def test_plan_takes_the_drivers_capacities_and_servers():
    caps = {h: HostCapacity(h, 32, 0, 64 * GB, 0, 1000, 0)
            for h in ("c1", "c2", "c3")}
    services = control() + [svc("c1", status="disabled"), svc("c2"),
                            svc("c3", state="down")]
    body = nova_body(tags=[])
    body["flavor"]["extra_specs"] = {}
    servers = [
        Server("5f0c", "web-1", "ACTIVE", "c1", raw=body),
        # a fake driver's Server without Nova's answer
        Server("77de", "db-1", "SHUTOFF", "c1", vm_state="stopped")]
    facts = drain.server_facts(servers)
    assert facts[0] == server_from_nova(body)
    assert (facts[1].id, facts[1].name, facts[1].status, facts[1].host,
            facts[1].vm_state) == ("77de", "db-1", "SHUTOFF", "c1",
                                   "stopped")
    assert drain.server_facts(facts) == facts
    p = drain.plan("c1", facts, caps, services, drain.Settings(),
                   force=True)
    assert p.destinations == ("c2",)
    assert p.skipped_hosts == {"c3": "not up"}
    assert p.steps == (("77de", "db-1", "cold"), ("5f0c", "web-1", "live"))
    assert p.notes == ("server db-1: size unknown, not counted in capacity "
                       "or admission",)


def test_capacities_unknown_refuse_softly():
    hosts, services = cloud()
    p = drain.plan(SOURCE, [srv("a")], None, services, drain.Settings())
    assert p.refusals == (drain.UNCOUNTED,)
    assert p.destinations == ("c2", "c3", "c4")
    assert p.capacity == () and not p.admission.ok
    assert not p.ok and not p.proceed
    forced = drain.plan(SOURCE, [srv("a")], None, services,
                        drain.Settings(), force=True)
    assert forced.proceed and forced.drainable == (("a", "a", "live"),)


def test_as_dict_is_json_and_says_why():
    hosts, services = cloud(4, ram_used=40 * GB)
    p = plan([srv("a", "web", ram=10 * GB), srv("e", "err", status="ERROR"),
              srv("o", "kept", tags=("instanceha:no-drain",))],
             hosts, services)
    d = json.loads(json.dumps(p.as_dict()))
    assert d["ok"] is False and d["proceed"] is False
    assert d["refusals"] == list(p.refusals)
    assert [(s["id"], s["how"]) for s in d["steps"]] == [
        ("a", "live"), ("o", "leave"), ("e", "defer")]
    assert d["steps"][0]["why"] == "server web (a) is ACTIVE: live-migrated"
    assert p.why["o"].startswith("server kept (o) has the tag")
    assert d["capacity"][0]["needed"] == {"vcpus": 2, "ram_mb": 10 * GB,
                                          "disk_gb": 20}
    assert d["admission"]["checks"][0]["largest"]["ram"] == ["c2"]
    assert d["reasons"][0] == {"kind": "opt_out", "subject": "o",
                               "text": p.refusals[0], "hard": False}
    assert d["summary"][0].startswith("room in zone az1: 1 server(s) need")
    assert d["summary"][1].startswith("HA admission: HA admission in zone")
