"""The operator API's instance repair endpoints (issue 25):

    GET  /servers/<id>/repair    the server's case (if one is open), its
                                 markers (Nova's metadata) and its journal
                                 rows, newest last
    POST /servers/<id>/repair    {"reason": "...", "level": "restart" |
                                 "reboot" | "migrate" | "rebuild"}: a
                                 one-off repair, up the ladder to that
                                 level (absent: the server's own level);
                                 {"clear": true, "reason": "..."}: clear
                                 the server's failure, its ladder starts
                                 again

Validated like a drain: an unknown server answers 404 naming it and
nothing is changed; instance repair off answers 409; a bad level 400.
"""

import structlog

from instanceha.api.payload import answer, load_object
from instanceha.drivers.compute import base
from instanceha.policy import repair_values

LOG = structlog.get_logger("instanceha.api")


def _server(api, server_id):
    """(Server, None) or (None, refusal answer)."""
    compute = api.engine.ctx.compute
    try:
        return compute.get_server(server_id), None
    except base.NotFound:
        return None, answer(404, {"error": "unknown server %r: Nova has no "
                                  "such server; nothing changed"
                                  % server_id[:100]})
    except (base.ComputeError, KeyError) as e:
        if isinstance(e, KeyError):
            return None, answer(404, {"error": "unknown server %r: nothing "
                                      "changed" % server_id[:100]})
        return None, answer(503, {"error": "cannot read server %s from "
                                  "Nova: %s" % (server_id[:100], e)})


def handle(api, method, server_id, body):
    repair = getattr(api.engine, "repair", None)
    if repair is None:
        return answer(503, {"error": "this engine cannot repair servers"})
    if method == "GET":
        server, refusal = _server(api, server_id)
        if refusal is not None:
            return refusal
        out = repair.describe(server.id)
        meta = (server.raw or {}).get("metadata") or {}
        out.update(name=server.name, status=server.status,
                   host=server.host, enabled=repair.enabled,
                   markers=repair.markers_view(meta))
        return answer(200, out)
    if method != "POST":
        return answer(405, {"error": "GET or POST"})
    try:
        args = load_object(body)
    except (TypeError, ValueError) as e:
        return answer(400, {"error": "bad request body: %s" % e})
    clear = args.get("clear", False)
    if not isinstance(clear, bool):
        return answer(400, {"error": "clear must be true or false"})
    level = args.get("level")
    rank = None
    if level is not None:
        if clear:
            return answer(400, {"error": "give level or clear, not both"})
        found, why = repair_values.parse_level(str(level),
                                               repair_values.Ladder)
        if found is None or int(found) == 0:
            return answer(400, {"error": "level %r %s" % (
                level, why or "allows no repair action")})
        rank = int(found)
    if not repair.enabled:
        return answer(409, {"error": "instance repair is off "
                            "([instance_repair] enabled = false); nothing "
                            "changed"})
    server, refusal = _server(api, server_id)
    if refusal is not None:
        return refusal
    reason = str(args.get("reason") or "no reason given")
    if clear:
        repair.clear(server.id, reason)
        LOG.info("operator_command", command="repair --clear",
                 server=server.id, reason=reason)
        return answer(202, {"server": server.id, "command": "clear"})
    view = repair.request(server.id, level=rank, reason=reason)
    LOG.info("operator_command", command="repair", server=server.id,
             level=level, reason=reason)
    return answer(202, {"server": server.id, "command": "repair",
                        "level": level, "case": view})
