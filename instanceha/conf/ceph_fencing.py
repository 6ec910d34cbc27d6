from oslo_config import cfg

from instanceha.conf import _group

GROUP = "ceph_fencing"
OPTS = [
    cfg.StrOpt("conf_file", default="/etc/ceph/ceph.conf",
               help="ceph.conf of the cluster whose monitors the "
                    "ceph_blocklist fencing method asks (an inventory "
                    "method's ceph_conf field overrides it for its host). "
                    "Its keyring is the one ceph.conf names, or "
                    "[ceph_fencing] keyring."),
    cfg.StrOpt("client_name", default="client.admin",
               help="Ceph user the ceph_blocklist method connects as. It "
                    "needs the monitor capability to change the OSD map's "
                    "blocklist, e.g. caps mon 'allow command \"osd "
                    "blocklist\"'."),
    cfg.StrOpt("keyring", default=None,
               help="Keyring holding that user's key (default: what "
                    "ceph.conf says). Keep it readable by instanceha "
                    "only."),
    cfg.FloatOpt("timeout", default=10.0, min=1, max=300,
                 help="Seconds for connecting to the monitors and for one "
                      "monitor command; a monitor that does not answer "
                      "within it fails the method (its level then hands "
                      "over to the next)."),
    cfg.FloatOpt("blocklist_expire", default=10 * 365 * 86400.0, min=3600,
                 help="Seconds a blocklist entry lasts in Ceph (Ceph's "
                      "own default is one hour, after which a host still "
                      "running would write again). instanceha removes "
                      "the entry itself once the host is back and its "
                      "service cleaned up; this only bounds an entry "
                      "left behind."),
    cfg.StrOpt("rados_path", default="/usr/lib/python3/dist-packages",
               help="Directory holding the Debian package python3-rados' "
                    "module (its rados.cpython shared object), loaded "
                    "from there alone when the service's Python does not import rados "
                    "itself (a virtualenv without system site-packages)."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Ceph fencing")
