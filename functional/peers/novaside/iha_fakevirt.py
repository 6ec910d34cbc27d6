"""The bed's virt driver: Nova's ``fake.FakeDriverWithoutFakeNodes`` whose
live migrations can be held in ``running`` on request.

Nova's fake driver copies nothing, so a live migration is ``running`` for a
fraction of a second: too short for a test to act on a migration in
flight (a drain cancelled mid-way must abort one). Nova's own test driver
``fake.FakeLiveMigrateDriver`` keeps each live migration running until it
is aborted or forced to complete (or 5 s pass); this driver does the same,
only while the source host's hold file says so, and for as long as it does.

The hold file is ``<state_path>/hold-live-migrations`` of the source
compute (``NovaCloud.hold_live_migrations``): ``*`` holds every live
migration from that host, server uuids hold those servers'. Without it,
or for any other server, ``live_migration`` is the fake driver's own: the
migration completes at once. A held migration ends when:

* Nova asks the driver to abort it (``DELETE
  /servers/{id}/migrations/{mid}``): Nova's rollback runs with
  ``migration_status = 'cancelled'``, the server stays on its source;
* Nova asks to force it to complete, or the hold is lifted: Nova's
  post-migration runs, the server is on its destination;
* ``HOLD_MAX`` seconds pass (a hold forgotten by a test ends by itself).

While held, the migration reports progress as the libvirt driver's monitor
does (``nova/virt/libvirt/migration.py`` ``save_stats``): Nova's migration
record gets ``memory_total_bytes`` and a ``memory_remaining_bytes`` going
down by ``STEP`` every ``REPORT_EVERY`` seconds (never reaching 0 within
``HOLD_MAX``): a big guest copying steadily, as ``GET
/servers/{id}/migrations`` shows it. With the word ``stalled`` in the hold
file nothing is reported: a migration that makes no progress.

A guest may also go off by itself (instance repair, issue 25): the
power file ``<state_path>/guest-power`` of the server's compute
(``NovaCloud.guest_power_off``) holds lines ``<server uuid> <power state>
<token>`` (``shutdown``, ``crashed`` or ``suspended``); the driver applies
each line once (by its token), when Nova next asks it for the server's
power state (``get_info``): the guest is off, as a libvirt domain that
shut down or crashed, until Nova starts or reboots it. Nova's
power-state sync (``[DEFAULT] sync_power_state_interval``) then stops the
server with its own context, as it does for a real guest. Servers not in
the file report what Nova last set, as the fake driver does.

Nothing else of Nova is changed. nova-compute loads drivers only from the
``nova.virt`` package: ``compute_launch.py`` registers this module there
as ``nova.virt.iha_fake``.
"""

import os
import threading
import time

import nova.conf
from nova.compute import power_state
from nova.virt import fake

CONF = nova.conf.CONF

HOLD_FILE = "hold-live-migrations"
#: the longest a hold keeps one migration running
HOLD_MAX = 300.0
#: how often a held migration looks at the hold file and Nova's requests
TICK = 0.1
#: progress of a held migration: 1 GiB to copy, 1 MiB less every 0.5 s
TOTAL = 1 << 30
STEP = 1 << 20
REPORT_EVERY = 0.5


POWER_FILE = "guest-power"
POWER_STATES = {"shutdown": power_state.SHUTDOWN,
                "crashed": power_state.CRASHED,
                "suspended": power_state.SUSPENDED}


def power_requests(state_path):
    """[(server uuid, power state, token)] of the power file."""
    try:
        with open(os.path.join(state_path, POWER_FILE)) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        words = line.split()
        if len(words) == 3 and words[1] in POWER_STATES:
            out.append((words[0], POWER_STATES[words[1]], words[2]))
    return out


def hold_of(state_path, server_id):
    """None when the hold file under ``state_path`` does not hold
    ``server_id``; else "stalled" or "progress"."""
    try:
        with open(os.path.join(state_path, HOLD_FILE)) as f:
            words = f.read().split()
    except FileNotFoundError:
        return None
    if "*" not in words and server_id not in words:
        return None
    return "stalled" if "stalled" in words else "progress"


def report(migration, remaining):
    """Nova's migration record: ``remaining`` of TOTAL bytes left to copy
    (as libvirt's save_stats writes it)."""
    migration.memory_total = TOTAL
    migration.memory_processed = TOTAL - remaining
    migration.memory_remaining = remaining
    migration.disk_total = 0
    migration.disk_processed = 0
    migration.disk_remaining = 0
    migration.save()


class HeldLiveMigrationDriver(fake.FakeDriverWithoutFakeNodes):

    def __init__(self, virtapi, read_only=False):
        super().__init__(virtapi, read_only)
        self._lock = threading.Lock()
        #: server uuid -> "abort" | "complete", asked by Nova
        self._asked = {}
        #: tokens of the power file's lines already applied
        self._applied = set()

    def get_info(self, instance, use_cache=True):
        with self._lock:
            for uuid, state, token in power_requests(CONF.state_path):
                if uuid == instance.uuid and token not in self._applied \
                        and uuid in self.instances:
                    self._applied.add(token)
                    self.instances[uuid].state = state
        return super().get_info(instance, use_cache)

    def _take(self, server_id):
        with self._lock:
            return self._asked.pop(server_id, None)

    def live_migration(self, context, instance, dest, post_method,
                       recover_method, block_migration=False,
                       migrate_data=None):
        deadline = time.monotonic() + HOLD_MAX
        asked = None
        remaining = TOTAL
        next_report = time.monotonic()
        migration = getattr(migrate_data, "migration", None)
        while asked is None and time.monotonic() < deadline:
            how = hold_of(CONF.state_path, instance.uuid)
            if how is None:
                break
            if how == "progress" and migration is not None \
                    and time.monotonic() >= next_report:
                report(migration, remaining)
                remaining = max(STEP, remaining - STEP)
                next_report = time.monotonic() + REPORT_EVERY
            time.sleep(TICK)
            with self._lock:
                asked = self._asked.get(instance.uuid)
        if self._take(instance.uuid) == "abort":
            recover_method(context, instance, dest, migrate_data,
                           migration_status="cancelled")
            return
        post_method(context, instance, dest, block_migration, migrate_data)

    def live_migration_abort(self, instance):
        with self._lock:
            self._asked[instance.uuid] = "abort"

    def live_migration_force_complete(self, instance):
        with self._lock:
            self._asked[instance.uuid] = "complete"
