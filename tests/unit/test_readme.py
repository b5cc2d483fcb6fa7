"""The configuration guide's table (docs/configuration.md) against the real flags and
defaults of ``rtts serve``: every flag is in the table, and every default the table gives is
the one the code uses (it once said ``zh=kokoro/jm_kumo`` where the code has
``zh=kokoro/zf_xiaoxiao``). And the README: its test command is .ci/run's, and it stays a
landing page."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from rtts import config
from rtts.__main__ import build_parser
from rtts.engines.registry import DEFAULT_VOICE, KINDS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
DEPLOYMENT = ROOT / "docs" / "deployment.md"
# What the table writes for "no value": the feature is off, or decided at run time (the
# cores, the page's own origin...), never a number or a name of its own.
_NOTHING = {None, (), False, 0}


def table_rows() -> list[list[str]]:
    """The cells of each row of the table under "## Flags"."""
    section = CONFIGURATION.read_text().split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) > 20, "the configuration table is gone"
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in rows]


def serve_flags() -> dict[str, str]:
    """``--flag`` → its Config field (or engine flag's dest), from the real parser."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    serve = sub.choices["serve"]  # type: ignore[attr-defined]
    return {opt: a.dest for a in serve._actions for opt in a.option_strings if opt.startswith("--") and opt != "--help"}


def real_defaults() -> dict[str, object]:
    """Each serve flag's dest → the default the server runs with when it is not given."""
    out: dict[str, object] = {f.name: f.default for f in fields(config.Config)}
    out.update(token_file=None, publish_token_file=None)  # read into token, publish_token
    out["default_voice"] = DEFAULT_VOICE
    out["lang_voices"] = ",".join(f"{lang}={voice}" for k in KINDS for lang, voice in k.lang_voices)
    for k in KINDS:
        out[f"first_unit_chars_{k.name}"] = k.first_unit_chars
    return out


def _same(shown: str, real: object, dest: str) -> bool:
    shown = shown.strip().strip("`")
    if dest == "models_dir":
        return shown.startswith("~/.local/share/rtts/models")
    if dest == "cache_dir":
        return shown.startswith("~/.cache/rtts")
    if isinstance(real, (int, float)) and not isinstance(real, bool) and re.fullmatch(r"[\d.]+", shown):
        return float(shown) == float(real)
    if real is True:  # a flag parsed by config._yes
        return shown == "on"
    if real in _NOTHING or real == "":
        return not re.search(r"\d", shown)  # "none", "off", "cores", "own origin + localhost"
    return shown == str(real)


def documented_defaults() -> list[tuple[str, str, str]]:
    """(flag, the default the table shows, the row) for each flag named in a row's first cell."""
    out = []
    for row in table_rows():
        flags = [f for f in re.findall(r"`(--[a-z0-9-]+)`", row[0])]
        shown = [row[1]] if len(flags) == 1 else [s.strip() for s in row[1].split(",")]
        if len(flags) > 1 and len(shown) != len(flags):
            shown = [row[1]] * len(flags)  # one default for all of them
        out += [(flag, value, row[0]) for flag, value in zip(flags, shown)]
    return out


def test_every_serve_flag_is_in_the_configuration_table() -> None:
    named = {f for row in table_rows() for f in re.findall(r"`(--[a-z0-9-]+)`", " ".join(row))}
    missing = sorted(set(serve_flags()) - named)
    assert not missing, f"rtts serve flags missing from docs/configuration.md: {missing}"
    unknown = sorted(named - set(serve_flags()))
    assert not unknown, f"docs/configuration.md names flags rtts serve does not have: {unknown}"


@pytest.mark.parametrize(("flag", "shown", "row"), documented_defaults())
def test_the_documented_default_is_the_real_one(flag: str, shown: str, row: str) -> None:
    dest = serve_flags()[flag]
    real = real_defaults()[dest]
    assert _same(shown, real, dest), f"docs/configuration.md says {flag} defaults to {shown!r}; the code uses {real!r}"


def test_the_table_checks_what_matters() -> None:
    """The comparison itself: the old, wrong Mandarin default is caught, the right one passes."""
    assert not _same("`zh=kokoro/jm_kumo,ja=kokoro/jf_alpha`", real_defaults()["lang_voices"], "lang_voices")
    assert _same("`zh=kokoro/zf_xiaoxiao,ja=kokoro/jf_alpha`", real_defaults()["lang_voices"], "lang_voices")
    assert not _same("32", 16, "channel_queue") and _same("300", 300.0, "idle_unload")
    assert not _same("8", None, "max_handshakes")


def test_the_systemd_status_line_states_no_voice_count_that_drifts() -> None:
    # It once said "serving 6 voices" where the built-ins alone are 29 (and extra voices add more).
    status = re.search(r"systemctl status rtts\s+#\s*(.*)", DEPLOYMENT.read_text())
    assert status and not re.search(r"serving \d+ voices", status.group(1)), status


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    readme = README.read_text()
    command = re.search(r"run the whole test suite \(what `\.ci/run` runs\):\n\n```sh\n(.+)\n```", readme)
    assert command, "the README's test command is gone"
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == command.group(1)
    assert "fonts-noto-cjk" in command.group(1)  # the browser tests check CJK captions' font


def test_the_readme_is_a_landing_page() -> None:
    """Read in five minutes: at most 200 lines, the two set-up commands first (install and
    serve, then the contributor's), and a guide for each use, every link to docs/ alive."""
    readme = README.read_text()
    assert len(readme.splitlines()) <= 200
    blocks = re.findall(r"```sh\n(.+?)\n```", readme, re.S)
    assert blocks[:2] and blocks[0] == "pip install . && rtts serve" and blocks[1].endswith("python -m pytest"), blocks[:2]
    links = re.findall(r"\]\(((?:docs|models)/[^)#]+)", readme)
    assert len(set(links)) >= 12, links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def _anchors(doc: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    heads = re.findall(r"^#+ (.+)$", doc.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_the_guides_links_are_alive() -> None:
    """Every relative link in docs/ (the guides, cut out of the README and moved a folder
    down, and the benchmarks' history) names a file that exists, and a heading of it where
    the link names one."""
    dead = []
    for guide in sorted((ROOT / "docs").rglob("*.md")):
        for target, anchor in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", guide.read_text()):
            path = guide.parent / target if target else guide
            if not path.exists():
                dead.append(f"{guide.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                dead.append(f"{guide.name}: {target}#{anchor}")
    assert not dead, dead
