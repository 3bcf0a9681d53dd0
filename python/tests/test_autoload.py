"""kcache._autoload: integrations turned on from the environment alone (kcache-autoload.pth)."""

from __future__ import annotations

import sys
import sysconfig
import textwrap
from pathlib import Path

import kcache._autoload as autoload
from conftest import run_python


def _fake_integration(tmp_path: Path, *, install_body: str = "open(MARK, 'a').write('installed\\n')") -> dict[str, str]:
    """A framework package `fakefw` and an integration module `fakeint` under tmp_path."""
    (tmp_path / "fakefw").mkdir()
    (tmp_path / "fakefw" / "__init__.py").write_text(
        f"MARK = {str(tmp_path / 'mark')!r}\nopen(MARK, 'a').write('framework\\n')\nREADY = True\n"
    )
    (tmp_path / "fakeint.py").write_text(
        textwrap.dedent(
            f"""
            MARK = {str(tmp_path / 'mark')!r}
            def install():
                import fakefw
                assert fakefw.READY  # the framework's __init__ has run in full
                {install_body}
            """
        )
    )
    return {"PYTHONPATH": str(tmp_path)}


_SETUP = "import kcache._autoload as a; a.INTEGRATIONS['KCACHE_FAKE'] = ('fakefw', 'fakeint'); "


def test_install_runs_after_the_framework_imports_and_only_then(tmp_path: Path) -> None:
    env = _fake_integration(tmp_path)
    code = _SETUP + (
        "print(a.activate({'KCACHE_FAKE': '1'})); import os; "
        f"print(os.path.exists({str(tmp_path / 'mark')!r})); import fakefw; import fakefw"
    )
    r = run_python(code, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['KCACHE_FAKE']", "False"]
    assert (tmp_path / "mark").read_text() == "framework\ninstalled\n"


def test_a_framework_already_imported_is_installed_at_once(tmp_path: Path) -> None:
    env = _fake_integration(tmp_path)
    r = run_python("import fakefw; " + _SETUP + "a.activate({'KCACHE_FAKE': 'yes'}); a.activate({'KCACHE_FAKE': '1'})", env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "mark").read_text() == "framework\ninstalled\n"


def test_off_values_install_nothing(tmp_path: Path) -> None:
    env = _fake_integration(tmp_path)
    for value in ("", "0", "false", "No", " off "):
        r = run_python(_SETUP + f"print(a.activate({{'KCACHE_FAKE': {value!r}}})); import fakefw", env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "[]"
    assert (tmp_path / "mark").read_text() == "framework\n" * 5


def test_a_failing_install_warns_once_and_the_import_goes_on(tmp_path: Path) -> None:
    env = _fake_integration(tmp_path, install_body="raise RuntimeError('internals moved')")
    r = run_python(_SETUP + "a.activate({'KCACHE_FAKE': '1'}); import fakefw; print(fakefw.READY)", env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
    assert r.stderr.count("RuntimeWarning") == 1
    assert "KCACHE_FAKE is set but fakeint.install() failed (RuntimeError: internals moved)" in r.stderr


def test_the_pth_file_is_installed_and_names_every_integration() -> None:
    pth = Path(sysconfig.get_paths()["purelib"]) / "kcache-autoload.pth"
    if not pth.exists():
        pth = Path(sysconfig.get_paths()["platlib"]) / "kcache-autoload.pth"
    assert pth.exists(), f"the kcache package did not install {pth.name} into site-packages"
    line = pth.read_text()
    assert line.startswith("import ") and line.count("\n") <= 1
    for var in autoload.INTEGRATIONS:
        assert f"'{var}'" in line
    assert "('', '0', 'false', 'no', 'off')" in line and autoload._OFF == ("", "0", "false", "no", "off")


def test_kcache_triton_from_the_environment_alone() -> None:
    code = "import triton; print(triton.knobs.cache.manager_class.__name__)"
    r = run_python(code, {"KCACHE_TRITON": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "KCacheManager"
    r = run_python("import sys; import triton; print(triton.knobs.cache.manager_class); print('kcache' in sys.modules)", {"KCACHE_TRITON": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None", "False"]


def test_a_process_without_the_variables_does_not_import_kcache() -> None:
    env_off = {v: "" for v in autoload.INTEGRATIONS}
    r = run_python("import sys; print('kcache' in sys.modules)", env_off)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
    assert sys.executable


def test_after_import_runs_once_the_module_has_loaded_or_at_once(tmp_path: Path) -> None:
    env = _fake_integration(tmp_path)
    (tmp_path / "fakefw" / "sub.py").write_text(f"open({str(tmp_path / 'mark')!r}, 'a').write('sub\\n')\nREADY = 1\n")
    code = (
        "import kcache._autoload as a, sys\n"
        f"MARK = {str(tmp_path / 'mark')!r}\n"
        "def seen(): open(MARK, 'a').write('after:' + str(getattr(sys.modules['fakefw.sub'], 'READY', None)) + '\\n')\n"
        "a.after_import('fakefw.sub', seen)\n"
        "import fakefw\n"
        "open(MARK, 'a').write('between\\n')\n"
        "import fakefw.sub\n"
        "a.after_import('fakefw.sub', lambda: open(MARK, 'a').write('again\\n'))\n"
        "a.after_import('fakefw.sub', lambda: 1 / 0)\n"
    )
    r = run_python(code, env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "mark").read_text() == "framework\nbetween\nsub\nafter:1\nagain\n"
    assert r.stderr.count("RuntimeWarning: kcache: what was to run after fakefw.sub imported failed") == 1
