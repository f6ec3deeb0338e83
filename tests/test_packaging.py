"""The wheel installs the backend layer under pallaslab's name, not as a generic top-level
`lowering` package in site-packages."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_pallaslab_lowering_and_no_top_level_lowering(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("pallaslab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"pallaslab", f"{wheel.name.split('-py')[0]}.dist-info"}, tops
    assert "pallaslab/lowering/api.py" in names and "pallaslab/lowering/__init__.py" in names
    assert "pallaslab/views/static/prelude.js" in names  # the widgets' ES modules ship too


def test_the_checkout_imports_the_lowering_folder_as_pallaslab_lowering():
    link = ROOT / "pallaslab" / "lowering"
    assert link.is_symlink() and link.resolve() == (ROOT / "lowering").resolve()
    import pallaslab.lowering.api

    assert Path(pallaslab.lowering.api.__file__).resolve().parent == (ROOT / "lowering")
