from oslo_config import cfg

from instanceha.conf import _group

GROUP = "journal"
OPTS = [
    cfg.StrOpt("connection",
               default="sqlite:////var/lib/instanceha/journal.sqlite",
               secret=True,
               help="SQLAlchemy URL of the journal that records every "
                    "transition, action and evacuation before it starts. "
                    "SQLite for one replica; mysql+pymysql:// or "
                    "postgresql:// for several. Losing it loses the audit "
                    "trail, not safety: Nova's disabled_reason is re-read at "
                    "start."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Journal")
