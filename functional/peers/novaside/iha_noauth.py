"""Paste filter giving every nova-api request an admin context (tests only).

Nova dropped its own no-auth filter; Keystone is not part of this test bed.
The token header is read as ``user:project``; an absent token, or the word
keystoneauth's ``none`` plugin sends, means an admin in project ``admin``.
Roles follow: ``admin`` gets admin/member/reader, any other user
member/reader, so policy checks still run for non-admin callers.
"""

import webob.dec

from nova import context
from nova.api import wsgi

_ANONYMOUS = ("", "notused")


class NoAuthContext(wsgi.Middleware):

    @webob.dec.wsgify(RequestClass=wsgi.Request)
    def __call__(self, req):
        token = req.headers.get("X-Auth-Token", "")
        if token in _ANONYMOUS:
            token = "admin:admin"
        user, _, project = token.partition(":")
        project = project or user
        admin = user == "admin"
        req.environ["nova.context"] = context.RequestContext(
            user_id=user, project_id=project, is_admin=admin,
            roles=["admin", "member", "reader"] if admin else ["member", "reader"],
            remote_address=req.remote_addr or "127.0.0.1", auth_token=token)
        return self.application
