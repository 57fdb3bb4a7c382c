"""`python -m rig_adapters install-pth | list`."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

PTH_NAME = "rig_adapters.pth"
PTH_LINE = "import rig_adapters.bootstrap\n"


def install_pth(site_dir: str | None = None) -> Path:
    """Write the .pth that arms adapters at interpreter start into this environment's
    site-packages (also right for editable installs, whose sources live elsewhere)."""
    path = Path(site_dir or sysconfig.get_paths()["purelib"]) / PTH_NAME
    path.write_text(PTH_LINE)
    return path


def main(argv: list[str]) -> int:
    if argv[:1] == ["install-pth"]:
        print(f"wrote {install_pth(argv[1] if len(argv) > 1 else None)}")
        return 0
    if argv[:1] == ["list"]:
        from rig_adapters.registry import REGISTRY

        for spec in REGISTRY:
            print(f"{spec.name:14} gate={spec.gate:22} engines={','.join(spec.engines)}  {spec.summary}")
        return 0
    if argv[:1] == ["check-targets"] and len(argv) == 2:
        from rig_adapters.targets import check_installed

        rows = check_installed(argv[1])
        for name, state, detail in rows:
            print(f"{name}\t{state}\t{detail}")
        return 1 if any(state == "refuses" for _, state, _ in rows) else 0
    print("usage: python -m rig_adapters install-pth [SITE_DIR] | list | check-targets ENGINE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
