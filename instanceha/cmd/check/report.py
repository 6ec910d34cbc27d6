"""What ``instanceha check`` found: one finding per line (OK, WARN, FAIL,
SKIP), each masked of secrets, and the exit code they add up to (2 when
``instanceha run`` would refuse to start, as it exits)."""

import dataclasses

from instanceha import log

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"


@dataclasses.dataclass
class Finding:
    level: str
    what: str
    text: str
    #: a start-up check of ``instanceha run`` failed: it would not start
    refuses: bool = False


class Report:
    """Findings in order; rendered for a terminal."""

    def __init__(self):
        self.findings = []

    def add(self, level, what, text, refuses=False):
        finding = Finding(level, what, log.mask_text(str(text)), refuses)
        self.findings.append(finding)
        return finding

    def count(self, level):
        return sum(1 for f in self.findings if f.level == level)

    @property
    def refusals(self):
        return sum(1 for f in self.findings if f.refuses)

    @property
    def exit_code(self):
        """2 when ``instanceha run`` would refuse to start (as run exits),
        1 when another problem would prevent a recovery, else 0."""
        if self.refusals:
            return 2
        return 1 if self.count(FAIL) else 0

    def render(self):
        # A start-up refusal is run's line, which may name its step.
        lines = ["%-4s  %s" % (f.level, f.text
                               if f.text.startswith(f.what + ": ")
                               else "%s: %s" % (f.what, f.text))
                 for f in self.findings]
        fails, warns = self.count(FAIL), self.count(WARN)
        if self.refusals:
            lines.append("RESULT: instanceha run would refuse to start: %d "
                         "problem(s)%s" % (fails, "; %d warning(s)" % warns
                                           if warns else ""))
        elif fails:
            lines.append("RESULT: %d problem(s) would prevent a recovery"
                         "%s" % (fails, "; %d warning(s)" % warns
                                 if warns else ""))
        elif warns:
            lines.append("RESULT: ready to recover, with %d warning(s)"
                         % warns)
        else:
            lines.append("RESULT: ready to recover")
        return "\n".join(lines)
