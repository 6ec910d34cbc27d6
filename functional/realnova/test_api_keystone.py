"""The operator API behind a real Keystone: ``[api] auth_strategy =
keystone`` with keystonemiddleware validating tokens against the bed's
Keystone and the default policy (admin role).

No token and a made-up token are 401, a member's and a reader's token 403
(the host untouched), an admin's token 202 and the host is suspended; the
CLI gets its token through keystoneauth from the clouds.yaml the engine
uses and resumes the host; /healthz stays open. No token reaches the
engine's log.
"""

import json
import os
import subprocess
import sys

from functional import httpcall
from functional.realnova import keystone_api


def _call(url, method="GET", token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Auth-Token"] = token
    status, _, raw = httpcall.request(url, method, body, headers,
                                      timeout=30)
    return status, raw


def test_commands_need_a_keystone_admin_token(keystone_bed, keystone_engine):
    bed = keystone_bed
    ks = bed.keystone
    account = dict(ks.credentials("instanceha"))
    eng = keystone_engine(overrides=keystone_api.engine_overrides(ks))
    eng.start()
    api = eng.status()["api"]
    host = bed.hosts[-1]
    url = "%s/hosts/%s/suspend" % (api, host)
    body = json.dumps({"reason": "firmware", "forever": True}).encode()

    member, reader = ks.token("demo"), ks.token("observer")
    admin = ks.admin_token()
    assert _call(url, "POST", None, body)[0] == 401
    assert _call(url, "POST", "not-a-token", body)[0] == 401
    status, answer = _call(url, "POST", member, body)
    assert status == 403 and b"instanceha:host:suspend" in answer, answer
    assert _call(url, "POST", reader, body)[0] == 403
    assert eng.states()[host][0] == "active"
    assert _call(api + "/status")[0] == 401
    assert _call(api + "/status", token=member)[0] == 403
    assert _call(api + "/status", token=admin)[0] == 200
    assert _call(api + "/healthz")[0] in (200, 503)   # open: no 401

    status, answer = _call(url, "POST", admin, body)
    assert status == 202, answer
    eng.wait_state(host, "suspended", timeout=30)
    assert "firmware" in eng.states()[host][1]

    # The CLI: a token for the engine's own cloud (instanceha, admin on
    # project service) through keystoneauth.
    out = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "resume", host,
         "--reason", "done", "--config-file", eng.conf_path],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items()
             if k != "OS_CLIENT_CONFIG_FILE"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("%s: resume requested (was suspended)"
                                 % host)
    eng.wait_state(host, "active", timeout=30)
    accepted = [a for a in ks.authentications("instanceha")
                if a["outcome"] == "success"]
    assert accepted
    log = eng.log_text()
    for token in (member, reader, admin):
        assert token not in log
    assert account["password"] not in log
