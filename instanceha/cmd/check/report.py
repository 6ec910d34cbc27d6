"""What ``instanceha check`` found: one finding per line (OK, WARN, FAIL,
SKIP), each masked of secrets, and the exit code they add up to."""

import dataclasses

from instanceha import log

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"


@dataclasses.dataclass
class Finding:
    level: str
    what: str
    text: str


class Report:
    """Findings in order; rendered for a terminal."""

    def __init__(self):
        self.findings = []

    def add(self, level, what, text):
        finding = Finding(level, what, log.mask_text(str(text)))
        self.findings.append(finding)
        return finding

    def count(self, level):
        return sum(1 for f in self.findings if f.level == level)

    @property
    def exit_code(self):
        return 1 if self.count(FAIL) else 0

    def render(self):
        lines = ["%-4s  %s: %s" % (f.level, f.what, f.text)
                 for f in self.findings]
        fails, warns = self.count(FAIL), self.count(WARN)
        if fails:
            lines.append("RESULT: %d problem(s) would prevent a recovery"
                         "%s" % (fails, "; %d warning(s)" % warns
                                 if warns else ""))
        elif warns:
            lines.append("RESULT: ready to recover, with %d warning(s)"
                         % warns)
        else:
            lines.append("RESULT: ready to recover")
        return "\n".join(lines)
