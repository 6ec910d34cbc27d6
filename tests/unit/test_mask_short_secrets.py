"""Issue 34 part 5: a known secret is masked only where it stands as a
whole token, and a field is masked only where its name is a secret's,
never inside a file name. With the password ``x``, ``Max retries
exceeded`` was logged as ``Ma*** retries e***ceeded`` (which letters the
password holds); ``compute-0.pass: No such file or directory`` as
``compute-0.pass: *** such file or directory``."""

import io
import logging

import pytest
import structlog

from instanceha import log
from instanceha.drivers.fencing import base as fencing_base
from instanceha.drivers.fencing import bmh
from instanceha.drivers.fencing import chain
from instanceha.drivers.fencing import fence_agent_run
from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing import ipmi
from instanceha.sources import audit

#: short passwords, each a letter run of ordinary English words below
SHORT = ["x", "ex", "ab", "e"]
#: a text with every password of SHORT inside its words, and none alone
WORDS = ("Max retries exceeded with url: /redfish/v1/ (abort: table "
         "absent; Caused by NewConnectionError)")
#: the same password as a token of its own, as tools and libraries echo it
TOKENS = ["-P {pw} power off", "login 'admin':'{pw}' refused",
          "https://admin:{pw}@10.0.0.5/redfish", "password was {pw}",
          "bad password ({pw})", "{pw}"]


@pytest.mark.parametrize("pw", SHORT)
def test_a_short_password_inside_words_leaves_them_readable(pw):
    assert pw in WORDS
    assert log.mask_known(WORDS, [pw]) == WORDS


@pytest.mark.parametrize("pw", SHORT)
@pytest.mark.parametrize("template", TOKENS)
def test_a_short_password_standing_alone_is_masked(pw, template):
    text = template.format(pw=pw)
    masked = log.mask_known(text, [pw])
    assert masked == template.format(pw="***")


def test_whole_token_rule_with_punctuation_and_longest_first():
    # an edge that is punctuation needs no boundary; a word edge does
    assert log.mask_known("pw=p@ss! tail", ["p@ss!"]) == "pw=*** tail"
    assert log.mask_known("top@ss!", ["p@ss!"]) == "top@ss!"
    # the basic-auth form holding the password is masked whole
    assert log.mask_known("Basic YWRtaW46eA== for x", ["x", "YWRtaW46eA=="]) \
        == "Basic *** for ***"
    assert log.mask_known(None, ["x"]) is None
    assert log.mask_known("x y", [None, ""]) == "x y"


def _drivers_scrubbers():
    """Each place that masks a BMC's known password in an error text,
    as f(text, password) -> text."""
    def via_chain(text, pw):
        entry = inventory.parse({"hosts": {"compute-0": {
            "password": pw, "methods": [
                {"driver": "ipmi", "address": "10.0.0.6"}]}}},
            {"ipmi": ()})["compute-0"]

        class Failing:
            def power_state(self, bmc):
                raise fencing_base.FenceError(text)
        with pytest.raises(chain.FenceChainError) as e:
            chain.power_state(entry, lambda name: Failing())
        return str(e.value)       # one method: its reason alone

    def via_audit(text, pw):
        method = inventory.BMC(host="compute-0", driver="ipmi",
                               address="10.0.0.6", username="admin",
                               password=pw, options={})

        class Failing:
            def power_state(self, bmc):
                raise fencing_base.FenceError(text)
        return audit.read_power(lambda name: Failing(), method)
    return {
        "ipmi": lambda text, pw: ipmi._scrub(text, pw),
        "bmh": lambda text, pw: bmh._scrub(text, [pw]),
        "fence_agent": lambda text, pw: fence_agent_run.scrub(text, [pw]),
        "chain": via_chain,
        "audit": via_audit,
    }


SCRUBBERS = _drivers_scrubbers()


@pytest.mark.parametrize("where", sorted(SCRUBBERS))
@pytest.mark.parametrize("pw", ["x", "ex"])
def test_every_driver_keeps_words_and_masks_the_password(where, pw):
    scrub = SCRUBBERS[where]
    assert scrub(WORDS, pw) == WORDS
    assert scrub("RAKP: %s wrong" % pw, pw) == "RAKP: *** wrong"


def test_redfish_unreachable_with_a_one_letter_password_is_readable():
    """What a new user saw: nothing listens at the BMC's address, and the
    password is ``x``."""
    from tests.unit.test_redfish_driver import Clock, make_conf
    from instanceha.drivers.fencing.redfish import RedfishDriver
    bmc = inventory.BMC(host="compute-9", driver="redfish",
                        address="http://127.0.0.1:9", username="u",
                        password="x", options={"verify": False})
    with pytest.raises(fencing_base.FenceError) as err:
        RedfishDriver(make_conf(), sleep=Clock().sleep).power_off(bmc)
    assert "Max retries exceeded" in str(err.value), str(err.value)
    assert "***" not in str(err.value)


PASS_FILES = [
    "field password_file: cannot read /etc/instanceha/compute-0.pass: "
    "No such file or directory",
    "/etc/instanceha/bmc/pass: Permission denied",
    "open C:\\bmc\\compute-0.pass: No such file",
    "/etc/nova/admin.token: No such file or directory",
    "/etc/instanceha/compute-0.password: not UTF-8 text",
]


@pytest.mark.parametrize("text", PASS_FILES)
def test_a_pass_file_name_is_not_a_field(text):
    assert log.mask_text(text) == text


@pytest.mark.parametrize("text,expected", [
    ("db_pass=x", "db_pass=***"), ("passwd: ab", "passwd: ***"),
    ("my-pass: ab refused", "my-pass: *** refused"),
    ("--os-password ab", "--os-password ***"), ("--db-pass x", "--db-pass ***"),
    ("openstack --os-token=ab server list",
     "openstack --os-token=*** server list"),
    ("--api-key x", "--api-key ***"),
    ("fence_ipmilan --passwd x -o off", "fence_ipmilan --passwd *** -o off"),
    ("ipmitool -P x", "ipmitool -P ***"),
])
def test_fields_and_arguments_named_like_secrets_still_masked(text,
                                                               expected):
    assert log.mask_text(text) == expected


def test_a_port_flag_is_not_a_password_flag():
    assert log.mask_text("ipmitool -p 623 -U a") == "ipmitool -p 623 -U a"


def test_missing_pass_file_logged_readably(tmp_path):
    missing = tmp_path / "compute-0.pass"
    with pytest.raises(inventory.InventoryError) as e:
        inventory.parse({"hosts": {"compute-0": {
            "driver": "ipmi", "address": "10.0.0.6",
            "password_file": str(missing)}}}, {"ipmi": ()})
    old_config = structlog.get_config()
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    buf = io.StringIO()
    try:
        log.setup(stream=buf)
        structlog.get_logger("x").error("inventory_invalid",
                                        reason=str(e.value))
    finally:
        structlog.configure(**old_config)
        root.handlers[:] = old_handlers
        root.setLevel(old_level)
    assert "compute-0.pass: No such file or directory" in buf.getvalue(), \
        buf.getvalue()
