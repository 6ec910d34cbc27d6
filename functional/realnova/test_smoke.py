"""The peers alone, without instanceha: Nova's own evacuation cycle.

Proves the test bed: a BMC power-off kills the host's compute, Nova sees it
down, a forced-down host can be evacuated, and powering the BMC back on
restarts the compute, which cleans up and completes the migrations.
"""

from functional.peers import procs


def test_power_off_evacuate_power_on_completes_migrations(clean_bed):
    bed = clean_bed
    cloud = bed.cloud
    host = bed.hosts[0]
    ids = cloud.boot(host, 2)
    cloud.wait_servers(ids, host=host)

    bed.bmc(host).power_off()
    procs.wait_until(lambda: not cloud.compute_running(host), 10,
                     "killed by the BMC link", "bmclink")
    procs.wait_until(lambda: cloud.service(host)["state"] == "down", 30,
                     "seen down", "nova-api", cloud.log_of("nova-api"))

    # The scheduler needs a live target: under load a heartbeat can lag.
    others = [h for h in bed.hosts if h != host]
    procs.wait_until(lambda: all(cloud.service(h)["state"] == "up"
                                 for h in others), 60, "targets up",
                     "nova-api", cloud.log_of("nova-api"))
    svc = cloud.service(host)
    # before force-down Nova refuses? No: the service is down already; force
    # it down as instanceha does, then evacuate at 2.94 (servers stay ACTIVE)
    cloud.call("PUT", "/os-services/%s" % svc["id"], {"forced_down": True},
               microversion="2.53")
    for sid in ids:
        cloud.call("POST", "/servers/%s/action" % sid, {"evacuate": {}},
                   microversion="2.94")
    cloud.wait_servers(ids, timeout=120)
    # Right after the request a server can read ACTIVE on its old host
    # while its rebuild still runs (migration pre-migrating): wait for the
    # new host rather than reading it once.
    procs.wait_until(lambda: all(cloud.server(sid)["OS-EXT-SRV-ATTR:host"]
                                 != host for sid in ids), 120,
                     "servers rebuilt on another host", "nova-conductor",
                     cloud.log_of("nova-conductor"))
    procs.wait_until(lambda: {m["status"] for m in cloud.migrations(host)} == {"done"}
                     and len(cloud.migrations(host)) == 2, 60, "migrations done",
                     "nova-conductor", cloud.log_of("nova-conductor"))

    # forced_down cannot be unset while 'done' migrations remain
    resp = cloud.call("PUT", "/os-services/%s" % svc["id"], {"forced_down": False},
                      microversion="2.53", ok=None)
    assert resp.status_code == 400

    bed.bmc(host).power_on()
    procs.wait_until(lambda: cloud.compute_running(host), 10,
                     "started by the BMC link", "bmclink")
    procs.wait_until(lambda: {m["status"] for m in cloud.migrations(host)} == {"completed"},
                     90, "migrations completed", "nova-compute-%s" % host,
                     cloud.log_of("nova-compute-%s" % host))
    resp = cloud.call("PUT", "/os-services/%s" % svc["id"], {"forced_down": False},
                      microversion="2.53", ok=None)
    assert resp.status_code == 200, resp.text
