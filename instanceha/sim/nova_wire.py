"""The wire of the simulated Nova API: its URL prefix, the microversion
headers stamped on every answer, and Nova's fault bodies
(``{"badRequest": {"code": 400, "message": ...}}``)."""

from instanceha.sim import web

PREFIX = "/compute"
HEADER = "OpenStack-API-Version"
LEGACY_HEADER = "X-OpenStack-Nova-API-Version"
FAULT_NAMES = {400: "badRequest", 401: "unauthorized", 403: "forbidden",
               404: "itemNotFound", 405: "badMethod",
               409: "conflictingRequest"}


def vstr(v):
    return "%d.%d" % v


class ApiFault(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def fault(code, message, version=None):
    resp = web.Response(code, {FAULT_NAMES.get(code, "computeFault"): {
        "code": code, "message": message}})
    if version is not None:
        stamp(resp, version)
    return resp


def stamp(resp, version):
    resp.headers[HEADER] = "compute " + vstr(version)
    resp.headers[LEGACY_HEADER] = vstr(version)
    resp.headers["Vary"] = "%s, %s" % (HEADER, LEGACY_HEADER)
    return resp

