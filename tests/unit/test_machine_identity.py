"""Issue 34, part 3: the machine behind a BMC is proven to be the host.

An inventory entry pointing at another *live* machine (a typo, a recabled
BMC) passes every other check when that machine runs no compute service
and its BMC reports no host name (IPMI; Redfish with an empty HostName):
it reports On, so it is "seen On", and it is no other host's BMC. Then
the host dies and its power-off goes to the other machine. The host's
agent reports the machine's system UUID (DMI product_uuid); a BMC whose
system UUID (Redfish UUID, IPMI system GUID in either byte order) is
another is untrusted and never powers anything off."""

import uuid

import pytest

from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.inventory import BMC
from instanceha.engine import evidence as evidence_mod
from instanceha.events import AgentReport, AgentSilence, Event, EventKind as E
from instanceha.policy import proof
from instanceha.sources.audit import FencingAudit
from instanceha.api.server import OperatorAPI
from instanceha.cmd import status as status_cmd
from tests.unit.test_api_metrics import _samples
from tests.unit.test_engine import World

HOST = "4c4c4544-0042-3510-8052-b4c04f4e3232"      # compute-1's machine
OTHER = "9f0c2a51-7e3d-4b8e-a1c4-2d5e6f708192"     # the machine it points at
OTHER_BMC = "bmc-other"


def ipmi_lsb_first(text):
    """The 16 bytes an IPMI BMC that sends the GUID least significant
    byte first answers to Get System GUID."""
    return uuid.UUID(text).bytes[::-1]


def ipmi_smbios(text):
    """... and one that sends it in SMBIOS order (first three fields
    little-endian): the DMI text form is read from these bytes."""
    return uuid.UUID(text).bytes_le


REDFISH_NO_HOSTNAME = {"uuids": [OTHER]}          # HostName "" is dropped
IPMI_OTHER = {"uuids": fb.uuid_forms(ipmi_lsb_first(OTHER))}


class Pointed(World):
    """compute-1's entry reaches the BMC of ``reached`` (its own or
    another live machine's, which runs no compute service); the BMC
    reports what ``identity`` says about its machine."""

    def __init__(self, identity, wrong=True, **kw):
        super().__init__(**kw)
        self.ctx.inventory["compute-1"] = BMC(
            host="compute-1", driver="fake",
            address=OTHER_BMC if wrong else "bmc-compute-1")
        fencer = self.fencer
        real_state, real_off = fencer.power_state, fencer.power_off
        self.other_on = True
        self.other_power_offs = 0

        def power_state(bmc):
            if bmc.address == OTHER_BMC:
                return fb.PowerState.ON if self.other_on \
                    else fb.PowerState.OFF
            return real_state(bmc)

        def power_off(bmc):
            if bmc.address == OTHER_BMC:
                self.other_power_offs += 1
                self.other_on = False
                return
            real_off(bmc)
        fencer.power_state, fencer.power_off = power_state, power_off
        mine = self.ctx.inventory["compute-1"].address
        # the other hosts' BMCs report nothing about their machines
        fencer.system_identity = lambda bmc: (identity if bmc.address == mine
                                              else None)
        self.audit = FencingAudit(self.conf, self.compute, self.ctx.bmc_for,
                                  self.ctx.fencer, self.clock,
                                  sink=self.engine.submit)
        self.engine.unprotected = self.audit.unprotected

    def audit_once(self):
        self.audit.run_once()
        self.drain()

    def agent(self, kind, system_uuid=None):
        rec = self.engine.find("compute-1")
        at = self.clock()
        payload = (AgentReport(paths=("mgmt",), boot_id="b",
                               last_beat_at=at, compute=True,
                               system_uuid=system_uuid)
                   if kind is E.AGENT_BEATING
                   else AgentSilence(last_beat_at=at - 3, paths=("mgmt",)))
        self.engine.submit(Event(kind, rec.id, at, name="compute-1",
                                 source="agent", payload=payload))
        self.drain()

    def host_dies(self):
        self.compute.kill("compute-1")
        self.agent(E.AGENT_SILENT)


# -- the pure comparison ------------------------------------------------------

@pytest.mark.parametrize("raw", [ipmi_lsb_first(HOST), ipmi_smbios(HOST)],
                         ids=["lsb-first", "smbios-order"])
def test_both_ipmi_guid_encodings_match_the_dmi_text(raw):
    ev = proof.identity(None, {"uuids": fb.uuid_forms(raw)})
    assert proof.machine(ev, HOST)[0] == proof.VERIFIED


@pytest.mark.parametrize("found", [{"uuids": [HOST.upper()]},
                                   {"uuids": ["{%s}" % HOST]},
                                   {"uuids": [HOST.replace("-", "")]}])
def test_a_redfish_uuid_is_compared_in_canonical_form(found):
    ev = proof.identity(None, found)
    assert proof.machine(ev, HOST)[0] == proof.VERIFIED


def test_another_machines_uuid_is_a_mismatch_and_unknown_is_not_verified():
    for found in (REDFISH_NO_HOSTNAME, IPMI_OTHER):
        verdict, why = proof.machine(proof.identity(None, found), HOST)
        assert verdict == proof.MISMATCH
        assert OTHER in why and HOST in why and "another machine" in why
    verdict, why = proof.machine(proof.identity(None, {"uuids": [OTHER]}),
                                 None)
    assert (verdict, why) == (proof.NOT_VERIFIED, "identity not verified: "
                              "no agent reported the host's system UUID")
    verdict, why = proof.machine(proof.identity(None, None), HOST)
    assert verdict == proof.NOT_VERIFIED and "no system UUID" in why
    # a BMC reporting the all-zero placeholder reports none
    ev = proof.identity(None, {"uuids": [str(uuid.UUID(int=0))]})
    assert proof.machine(ev, HOST)[0] == proof.NOT_VERIFIED


# -- status and /metrics ------------------------------------------------------

def test_status_and_metrics_show_each_hosts_bmc_identity():
    w = Pointed(REDFISH_NO_HOSTNAME)
    w.pass_()
    api = OperatorAPI(w.conf, w.engine, w.clock)
    w.agent(E.AGENT_BEATING, HOST)
    w.audit_once()
    snap = w.engine.snapshot()
    by_name = {h["name"]: h["identity"] for h in snap["hosts"]}
    # compute-0 and compute-2 run no agent here: not verified
    assert by_name == {"compute-0": "not verified", "compute-1": "mismatch",
                       "compute-2": "not verified"}
    assert snap["fencing_identity"] == {"verified": 0, "not_verified": 2,
                                        "mismatch": 1}
    assert "BMC untrusted" in snap["unprotected"]["compute-1"]
    text = status_cmd.format_status(snap, now=w.clock())
    assert "[BMC identity mismatch]" in text
    assert "0 verified, 2 not verified, 1 reaching another machine" in text
    m = _samples(api)
    assert m[("instanceha_fencing_identity_methods",
              (("identity", "mismatch"),))] == 1
    assert m[("instanceha_fencing_identity_methods",
              (("identity", "not_verified"),))] == 2
    assert m[("instanceha_host_fencing_identity_mismatch",
              (("host", "compute-1"),))] == 1
    assert m[("instanceha_host_unprotected", (("host", "compute-1"),))] == 1


# -- the engine --------------------------------------------------------------

@pytest.mark.parametrize("identity", [REDFISH_NO_HOSTNAME, IPMI_OTHER],
                         ids=["redfish-empty-hostname", "ipmi-guid"])
def test_an_entry_reaching_another_live_machine_never_powers_it_off(identity):
    w = Pointed(identity)
    w.pass_()
    w.agent(E.AGENT_BEATING, HOST)
    w.audit_once()
    snapshot = w.engine.snapshot()
    assert "not the host" in snapshot["unprotected"]["compute-1"]
    w.host_dies()
    w.until("compute-1", "failed", passes=40)
    reason = w.state("compute-1")[1]
    assert "not the host" in reason and OTHER in reason, reason
    assert w.other_power_offs == 0 and w.other_on
    assert w.compute.migrations == []


@pytest.mark.parametrize("raw", [ipmi_lsb_first(HOST), ipmi_smbios(HOST)],
                         ids=["lsb-first", "smbios-order"])
def test_a_bmc_reporting_the_hosts_uuid_fences(raw):
    w = Pointed({"uuids": fb.uuid_forms(raw)}, wrong=False)
    w.pass_()
    w.agent(E.AGENT_BEATING, HOST)
    w.audit_once()
    assert "compute-1" not in w.engine.snapshot()["unprotected"]
    w.host_dies()
    w.until("compute-1", "evacuated", passes=60)
    assert w.fencer.powered_off == ["compute-1"]
    assert w.other_power_offs == 0


def test_the_reported_uuid_outlives_the_agent_and_a_restart():
    """A dead host's agent says nothing: the UUID it reported while it
    lived is kept in the journal, and binds after a restart."""
    w = Pointed(REDFISH_NO_HOSTNAME)
    w.pass_()
    w.agent(E.AGENT_BEATING, HOST)
    store = evidence_mod.EvidenceStore(w.journal, w.clock)
    store.load()
    assert store.host_uuid("compute-1") == HOST
    bmc = w.ctx.bmc_for("compute-1")
    store.identity_key("compute-1", inventory.method_key(bmc),
                       REDFISH_NO_HOSTNAME)
    assert "not the host" in store.untrusted(bmc)
    # an agent that later sends no UUID does not erase it
    w.agent(E.AGENT_BEATING, None)
    assert w.ctx.evidence.host_uuid("compute-1") == HOST


def test_without_an_agent_fencing_goes_on_unless_verification_is_required():
    w = Pointed(REDFISH_NO_HOSTNAME, wrong=False)
    w.pass_()
    bmc = w.ctx.bmc_for("compute-1")
    (label, verdict, text), = w.ctx.evidence.identities(bmc)
    assert verdict == proof.NOT_VERIFIED
    assert text.startswith("identity not verified")
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated", passes=60)
    assert w.fencer.powered_off == ["compute-1"]


def test_require_verified_identity_refuses_an_unverified_method():
    w = Pointed(None, wrong=False)
    w.conf.set_override("require_verified_identity", True, "fencing")
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "failed", passes=40)
    reason = w.state("compute-1")[1]
    assert "identity not verified" in reason
    assert "require_verified_identity" in reason
    assert w.fencer.powered_off == []


# -- instanceha check ---------------------------------------------------------

def test_check_fails_an_entry_reaching_another_machine(tmp_path):
    """The agents' UUIDs as the service journalled them; compute-1's BMC
    (IPMI order) reports another machine, compute-0's its own (SMBIOS
    order), compute-2 has no agent."""
    from instanceha.journal import Journal
    from tests.unit.test_check import Bed
    bed = Bed(tmp_path)
    journal = Journal("sqlite:///%s" % (tmp_path / "db" / "journal.sqlite"))
    store = evidence_mod.EvidenceStore(journal, lambda: 1000.0)
    store.agent_uuid("compute-0", OTHER)
    store.agent_uuid("compute-1", HOST)
    journal.close()
    reported = {"bmc-0": {"uuids": fb.uuid_forms(ipmi_smbios(OTHER))},
                "bmc-1": IPMI_OTHER, "bmc-2": {"uuids": [HOST]}}
    bed.fencer.system_identity = \
        lambda bmc: reported[bmc.address.split("//")[1]]
    report, text = bed.run()
    assert report.exit_code == 1, text
    lines = {f.what: (f.level, str(f.text)) for f in report.findings
             if f.what.startswith("fencing ")}
    assert lines["fencing compute-0"][0] == "OK"
    assert "identity verified" in lines["fencing compute-0"][1]
    level, line = lines["fencing compute-1"]
    assert level == "FAIL" and "not the host" in line and HOST in line
    assert lines["fencing compute-2"] == (
        "OK", "redfish https://bmc-2: power on; identity not verified: no "
              "agent reported the host's system UUID")
    # [fencing] require_verified_identity: an unverified method fails too
    bed = Bed(tmp_path, fencing={"require_verified_identity": True})
    bed.fencer.system_identity = \
        lambda bmc: reported[bmc.address.split("//")[1]]
    report, text = bed.run()
    level, line = {f.what: (f.level, str(f.text))
                   for f in report.findings}["fencing compute-2"]
    assert level == "FAIL" and "require_verified_identity" in line, line
