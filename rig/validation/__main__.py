"""python -m rig.validation: recompute every claimed figure from validation/ and say whether it holds.

    python -m rig.validation                      # every claim: one line each, answer first
    python -m rig.validation --claim ID -v        # one claim, every figure
    python -m rig.validation --write-docs         # render docs/validation.md from the claim files
    python -m rig.validation --quotes             # check figures quoted elsewhere as links to their claims

Exit codes: 0 every figure recomputes (or every quote holds); 1 some figure does not; 2 bad input (a
claim file or its evidence that cannot be read: one line naming the file, the field and the fix).
"""

from __future__ import annotations

import argparse
import sys

from rig.atomic import write_text_atomic
from rig.errors import RigError
from rig.exits import Exit
from rig.paths import REPO_ROOT
from rig.validation.claims import VALIDATION_DIR, Claim, read_claims
from rig.validation.docs import DOCS_PATH, render
from rig.validation.quotes import check_quotes
from rig.validation.recompute import figure_lines, recompute_all, verdict_line


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog="python -m rig.validation", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog="example: python -m rig.validation --claim vllm-gpu-delay-40us -v")
    out.add_argument("--claim", metavar="ID", help="recompute one claim (its folder's name under validation/)")
    out.add_argument("-v", "--verbose", action="store_true", help="print every figure, claimed beside recomputed")
    out.add_argument("--write-docs", action="store_true", help=f"write docs/{DOCS_PATH.name} from the claim files and exit")
    out.add_argument("--quotes", action="store_true",
                     help="check every figure quoted as a link to a claim (README.md, docs/, recipes/, ...) and exit")
    return out


def quotes(claims: list[Claim]) -> int:
    problems = check_quotes(REPO_ROOT, claims)
    if not problems:
        print("OK: every figure quoted as a link to a claim is one its claim prints")
        return Exit.OK
    print(f"NOT OK: {len(problems)} quoted figure(s) their claims do not print")
    for problem in problems:
        print(problem)
    return Exit.FAILED


def recompute(claims: list[Claim], verbose: bool) -> int:
    if not claims:  # a checkout without validation/ has nothing to recompute: that is no pass
        print(f"rig.validation: {VALIDATION_DIR}: no claim found; fix: run it from a full checkout (validation/ holds the evidence)")
        return Exit.BAD_INPUT
    results = recompute_all(claims, VALIDATION_DIR)
    bad = [r for r in results if r.error is not None]
    differ = [r for r in results if r.error is None and not r.ok]
    if not bad and not differ:
        print(f"OK: every figure of {len(results)} claim(s) recomputes from validation/ ({sum(r.figures for r in results)} figures)")
    else:
        print(f"NOT OK: of {len(results)} claim(s), {len(differ)} quote figures their evidence does not give and {len(bad)} "
              "have evidence that cannot be read")
    for result in results:
        print(verdict_line(result))
        if verbose:
            print("\n".join(figure_lines(result)))
    return Exit.BAD_INPUT if bad else Exit.FAILED if differ else Exit.OK


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        claims = read_claims(VALIDATION_DIR, None if args.write_docs or args.quotes else args.claim)
    except RigError as error:
        print(f"BAD: {error}", file=sys.stderr)
        return Exit.BAD_INPUT
    if args.write_docs:
        write_text_atomic(DOCS_PATH, render(claims))
        print(f"wrote docs/{DOCS_PATH.name} ({len(claims)} claims)")
        return Exit.OK
    return quotes(claims) if args.quotes else recompute(claims, args.verbose)


if __name__ == "__main__":
    sys.exit(main())
