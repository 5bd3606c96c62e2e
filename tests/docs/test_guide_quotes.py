"""What the guide says PyTorch says, and where it says PyTorch's code is, checked against the installed torch.

The guide's pages are the markdown cells of notebooks/guide_*.ipynb and docs/guide.md. Three kinds of statement are
checked; how a page writes each is the convention below.

**PyTorch's messages.** A page quotes an error or a warning in double quotes ("…"), or as a code span that starts
with the exception's class and a colon (`RuntimeError: …`). A code span of that form is always a message. A
double-quoted text of two words or more is a message where the page presents it as one: in the column of an
interface table whose header says what breaks "without it", or when a word that introduces a message (raises, fails
with, error, warns, asserts, refuses, stops with, says, message, sentence, words, matches) stands between the start of its
sentence (or the previous quote) and the quote. A quote joined to a message by "or" or a comma is one too.
A message is matched by its fixed text, since PyTorch formats values into most of its messages:

- `…` or `...` marks a part the page leaves out;
- the device's name (`sim`, in any case, also inside a word: `Autocastsim`, `torch.sim.is_available`), a
  number, a value PyTorch puts in single quotes (`'aten::matmul'`) and a name in angle brackets (`<name>`) stand
  where PyTorch formats a value in;
- the exception's class before the colon is Python's, not part of the message;
- a code span inside a double-quoted message stands for the same text with or without its backticks.

Each fixed fragment left between those (one with at least two words; shorter ones prove nothing and are skipped)
must occur in the installed torch: its Python sources, its headers (torch/include), or the read-only data of its
shared libraries (torch/lib/*.so, the `.rodata` section, where C++ keeps its string literals). C++ and Python build
many messages from separate literals, so a fragment torch lacks whole is also accepted as consecutive runs of at
least MIN_PIECE_WORDS words that torch has each (a short tail is looked up with the words before it). Fragments are
found one by one, not in order. A message that is not PyTorch's (CUDA's runtime, the C++ runtime, Python's) is
listed in tests/docs/verified_references.toml under `foreign_message`, with its author.

**File and line references.** A code span naming a file of PyTorch (`torch/…`, `c10/…`, `ATen/…`, `aten/…`,
`caffe2/…`, `functorch/…`, `torchgen/…`, `kineto/…` with an extension) must exist in the installed torch (a header
under torch/include) or be listed under `source_file` with what was checked. A line reference ("line 7006",
"lines 3493–3500", "lines 3445, 6717 and 6854", or `path:123`) belongs to the last such file named before it in the
same markdown cell; each one must be listed under `source_line` with a text that those lines of the
installed file contain, so that a new torch that moves the code fails here.

**Issues and pull requests.** A page writes them as `owner/repo#N` (a bare `#N` right after one takes its
repository); "issue N" or "PR N" in another form fails. Each must be listed under `issue` with what the page says
about it (its title or state), since the machine that runs this has no network.
"""
from __future__ import annotations

import functools
import json
import re
import struct
import tomllib
from pathlib import Path

import torch

from tests.docs.test_guide_interface_tables import table_cells

ROOT = Path(__file__).resolve().parents[2]
TORCH = Path(torch.__file__).resolve().parent
REFERENCES = Path(__file__).with_name("verified_references.toml")
PAGES = sorted((ROOT / "notebooks").glob("guide_*.ipynb")) + [ROOT / "docs" / "guide.md"]
DEVICE_NAMES = re.compile(r"(?i)simccl|sim|mydev")
MIN_PIECE_WORDS = 4

_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_DOUBLE_QUOTED = re.compile(r'"([^"\n]+(?:\n[^"\n]+)*)"')
_EXCEPTION_PREFIX = re.compile(r"^([A-Z]\w*(?:Error|Exception|Warning|Interrupt)):\s*(.*)$", re.DOTALL)
_INTRODUCES_MESSAGE = re.compile(
    r"(?i)\b(?:raise[sd]?|raising|fails? with|failing with|errors?|warns?|warning|asserts?|refuses?|refusing|"
    r"stops? with|says?|messages?|sentences?|words|match(?:es)?)\b")
_JOINS_MESSAGES = re.compile(r"^\s*(?:,|or|,\s*or)\s*$")
_SENTENCE_END = re.compile(r"[.!?:](?=\s)|\n\s*\n|^\s*[-*] ", re.MULTILINE)
_ELISION = re.compile(r"…|\.\.\.")
_FORMATTED_VALUE = re.compile(r"'[^']*'|<\w+>|\d+")
_TORCH_PATH = re.compile(
    r"^(?:torch|c10|ATen|aten|caffe2|functorch|torchgen|kineto)/[\w./-]*\w\.(?:py|pyi|h|hpp|cuh|cpp|cu|yaml)"
    r"(?::(\d+)(?:[-–](\d+))?)?$")
_LINE_PHRASE = re.compile(r"\blines? (\d+(?:\s*(?:[-–]|,|and)\s*\d+)*)")
_ISSUE = re.compile(r"(?<![\w/])([\w.-]+/[\w.-]+)?#(\d+)\b")
_LOOSE_ISSUE = re.compile(r"(?i)\b(?:issue|pull request|PR)\s+#?\d+")


def _markdown(page: Path) -> list[str]:
    """The page's markdown, one string per cell (docs/guide.md is one cell)."""
    if page.suffix == ".md":
        return [page.read_text()]
    notebook = json.loads(page.read_text())
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown"]


def _blocks(markdown: str) -> list[tuple[str, bool]]:
    """The text blocks of one cell, each with whether it is a cell of a table's "without it" column.

    A paragraph or list item is one block; a table row is split into its cells, each a block of its own."""
    blocks: list[tuple[str, bool]] = []
    without_column: int | None = None
    paragraph: list[str] = []
    lines = markdown.splitlines()
    for index, line in enumerate(lines):
        if line.lstrip().startswith("|"):
            cells = table_cells(line)
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if re.match(r"^\s*\|?\s*:?-{3,}", following):
                without_column = next((i for i, cell in enumerate(cells) if "without" in cell.lower()), None)
                continue
            if re.match(r"^\s*\|?\s*:?-{3,}", line):
                continue
            blocks.extend((cell, i == without_column) for i, cell in enumerate(cells))
            continue
        without_column = None
        if not line.strip() or re.match(r"^\s*[-*] |^\s*\d+\. ", line):
            if paragraph:
                blocks.append(("\n".join(paragraph), False))
            paragraph = [line] if line.strip() else []
        else:
            paragraph.append(line)
    if paragraph:
        blocks.append(("\n".join(paragraph), False))
    return blocks


def _outside_code(text: str) -> list[tuple[int, int]]:
    return [(match.start(), match.end()) for match in _CODE_SPAN.finditer(text)]


def messages_in(block: str, in_without_column: bool) -> list[str]:
    """The messages a block quotes, by the convention in this file's docstring."""
    code_spans = _outside_code(block)
    found: list[tuple[int, int, str]] = []
    for match in _CODE_SPAN.finditer(block):
        if _EXCEPTION_PREFIX.match(match.group(1)):
            found.append((match.start(), match.end(), match.group(1)))
    masked = _CODE_SPAN.sub(lambda span: "`" + "x" * (len(span.group(0)) - 2) + "`", block)  # code ends no sentence
    previous_end, previous_was_message = 0, False
    for match in _DOUBLE_QUOTED.finditer(block):
        if any(start < match.start() < end for start, end in code_spans):
            continue  # a quote inside a code span is code
        sentence_start = max([m.end() for m in _SENTENCE_END.finditer(masked, 0, match.start())], default=0)
        context = masked[max(sentence_start, previous_end):match.start()]
        text = re.sub(r"\s*\n\s*", " ", match.group(1))
        is_message = len(text.split()) >= 2 and (
            in_without_column or bool(_INTRODUCES_MESSAGE.search(context))
            or (previous_was_message and _JOINS_MESSAGES.match(context) is not None))
        if is_message:
            found.append((match.start(), match.end(), text))
        previous_end, previous_was_message = match.end(), is_message
    return [text for _, _, text in sorted(found)]


def fragments(message: str) -> list[str]:
    """The fixed text of a message: the parts between elisions, device names and formatted values."""
    prefixed = _EXCEPTION_PREFIX.match(message)
    if prefixed:
        message = prefixed.group(2)
    pieces = [message]
    for separator in (_ELISION, _FORMATTED_VALUE, DEVICE_NAMES):
        pieces = [part for piece in pieces for part in separator.split(piece)]
    pieces = [re.sub(r"^[\s.,:;!?]+", "", piece).rstrip() for piece in pieces]
    return [piece for piece in pieces if len(re.findall(r"[A-Za-z]{2,}", piece)) >= 2]


def _rodata(library: Path) -> bytes:
    """The `.rodata` section of a 64-bit little-endian ELF file: where C++ keeps its string literals."""
    with library.open("rb") as file:
        header = file.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            return b""
        section_offset, = struct.unpack_from("<Q", header, 0x28)
        entry_size, count, names_index = struct.unpack_from("<HHH", header, 0x3A)
        file.seek(section_offset)
        table = file.read(entry_size * count)
        sections = [struct.unpack_from("<IIQQQQ", table, i * entry_size) for i in range(count)]
        names_offset, names_size = sections[names_index][4], sections[names_index][5]
        file.seek(names_offset)
        names = file.read(names_size)
        for name, _type, _flags, _address, offset, size in sections:
            if names[name:names.index(b"\0", name)] == b".rodata":
                file.seek(offset)
                return file.read(size)
    return b""


@functools.cache
def torch_text() -> bytes:
    """Everything of the installed torch a message can be in, read once per test session."""
    parts = [path.read_bytes() for path in TORCH.rglob("*.py")]
    parts += [path.read_bytes() for path in (TORCH / "include").rglob("*") if path.suffix in {".h", ".hpp", ".cuh"}]
    parts += [_rodata(library) for library in sorted((TORCH / "lib").glob("*.so*"))]
    return b"\0".join(parts)


@functools.cache
def _contains(text: str) -> bool:
    corpus = torch_text()
    return any(corpus.find(variant.encode()) >= 0 for variant in {text, text.replace("`", "")})


def in_torch(fragment: str) -> bool:
    """Whether torch has the fragment: whole, or as runs of at least MIN_PIECE_WORDS words in order, for a
    message its source splits across string literals (C++ `"a " "b"`, Python `+=` or implicit concatenation)."""
    if _contains(fragment):
        return True
    words = fragment.split(" ")
    if len(words) <= MIN_PIECE_WORDS:
        return False
    start = 0
    while start < len(words):
        if len(words) - start < MIN_PIECE_WORDS:  # a short tail is found with the words before it
            return _contains(" ".join(words[-MIN_PIECE_WORDS:]))
        if not _contains(" ".join(words[start:start + MIN_PIECE_WORDS])):
            return False
        low, high = start + MIN_PIECE_WORDS, len(words)  # the longest run from `start` that torch has
        while low < high:
            middle = (low + high + 1) // 2
            if _contains(" ".join(words[start:middle])):
                low = middle
            else:
                high = middle - 1
        start = low
    return True


@functools.cache
def references() -> dict[str, list[dict]]:
    return tomllib.loads(REFERENCES.read_text())


def torch_file(path: str) -> Path | None:
    """The installed file a path of PyTorch's names, if the wheel has it."""
    candidates = [TORCH.parent / path, TORCH / "include" / path]
    if path.startswith("aten/src/"):
        candidates.append(TORCH / "include" / path.removeprefix("aten/src/"))
    return next((candidate for candidate in candidates if candidate.is_file()), None)


def _line_numbers(phrase: str) -> list[int]:
    numbers: list[int] = []
    for part in re.split(r"\s*(?:,|and)\s*", phrase):
        bounds = [int(number) for number in re.split(r"\s*[-–]\s*", part) if number]
        numbers.extend(range(bounds[0], bounds[-1] + 1) if len(bounds) == 2 else bounds)
    return numbers


def file_references(cell: str) -> list[tuple[str, tuple[int, ...]]]:
    """(path, lines) for each file a markdown cell names and each line reference in it; lines () for a bare path."""
    found: list[tuple[int, str, tuple[int, ...]]] = []
    for match in _CODE_SPAN.finditer(cell):
        path = _TORCH_PATH.match(match.group(1))
        if path:
            name = match.group(1).split(":")[0]
            lines = tuple(range(int(path.group(1)), int(path.group(2) or path.group(1)) + 1)) if path.group(1) else ()
            found.append((match.start(), name, lines))
    spans = _outside_code(cell)
    for match in _LINE_PHRASE.finditer(cell):
        if any(start <= match.start() < end for start, end in spans):
            continue
        named = [(position, name) for position, name, lines in found if not lines and position < match.start()]
        found.append((match.start(), max(named)[1] if named else "", tuple(_line_numbers(match.group(1)))))
    return [(name, lines) for _, name, lines in sorted(found)]


def issue_references(block: str) -> list[str]:
    """`owner/repo#N` for each issue or pull request a block names; a bare `#N` takes the repository before it."""
    found, repository = [], ""
    for match in _ISSUE.finditer(block):
        repository = match.group(1) or repository
        found.append(f"{repository}#{match.group(2)}" if repository else f"#{match.group(2)}")
    return found


def _page_blocks() -> list[tuple[str, str, bool]]:
    return [(str(page.relative_to(ROOT)), text, in_without)
            for page in PAGES for cell in _markdown(page) for text, in_without in _blocks(cell)]


def _page_cells() -> list[tuple[str, str]]:
    return [(str(page.relative_to(ROOT)), cell) for page in PAGES for cell in _markdown(page)]


def test_the_convention_finds_messages_and_their_fixed_fragments():
    row = '| `record` | `Event.record()` | "Backend doesn\'t support events." | step 6 | creates the event |'
    header = "| method | for | without it | need | contract |\n| --- | --- | --- | --- | --- |\n"
    blocks = _blocks(header + row)
    assert [text for text, in_without in blocks if in_without] == ['"Backend doesn\'t support events."']
    assert messages_in(*blocks[2]) == ["Backend doesn't support events."]
    prose = ('It fails with "Allocator for sim is not a DeviceAllocator", an internal assert. '
             'Catch the "no device here" case; answer "done". It raises `KeyError: \'sim\'` or '
             '`RuntimeError: device sim nyi`, then "Expected one of cpu, cuda, … device type" or "... device_count() is ..."')
    assert messages_in(prose, False) == ["Allocator for sim is not a DeviceAllocator", "KeyError: 'sim'",
                                         "RuntimeError: device sim nyi", "Expected one of cpu, cuda, … device type",
                                         "... device_count() is ..."]
    assert fragments("Allocator for sim is not a DeviceAllocator") == ["Allocator for", "is not a DeviceAllocator"]
    assert fragments("NotImplementedError: Could not run 'aten::matmul' with arguments from the 'Autocastsim' "
                     "backend.") == ["Could not run", "with arguments from the"]
    assert fragments("KeyError: 'sim'") == []
    assert in_torch("is not a DeviceAllocator") and not in_torch("is not a DeviceAllocator at all, says sim")


def test_the_convention_finds_file_line_and_issue_references():
    block = ("**`Scheduler._try`** (`torch/_inductor/scheduler.py`, line 7006) skips nodes; the other checks "
             "(lines 3445, 6717 and 6854) and `c10/core/Allocator.h:10-12` and `tests/docs/x.py`.")
    assert file_references(block) == [("torch/_inductor/scheduler.py", ()), ("torch/_inductor/scheduler.py", (7006,)),
                                      ("torch/_inductor/scheduler.py", (3445, 6717, 6854)),
                                      ("c10/core/Allocator.h", (10, 11, 12))]
    assert file_references("lines 3493–3500 of nothing") == [("", tuple(range(3493, 3501)))]
    assert issue_references("open (pytorch/pytorch#189367, #189138); intel/torch-xpu-ops#369") == [
        "pytorch/pytorch#189367", "pytorch/pytorch#189138", "intel/torch-xpu-ops#369"]
    assert _LOOSE_ISSUE.search("PyTorch issue 117482 moved it") and not _LOOSE_ISSUE.search("pytorch/pytorch#117482")


def test_every_quoted_message_is_pytorchs_own_text():
    foreign = {entry["text"] for entry in references().get("foreign_message", [])}
    wrong: list[str] = []
    checked = 0
    for page, block, in_without in _page_blocks():
        for message in messages_in(block, in_without):
            if message in foreign:
                continue
            missing = [fragment for fragment in fragments(message) if not in_torch(fragment)]
            checked += 1
            if missing:
                wrong.append(f'{page}: "{message}" (not in torch: {"; ".join(repr(m) for m in missing)})')
    assert checked >= 40, f"only {checked} messages found on the guide's pages: the convention no longer finds them"
    assert not wrong, ("messages presented as PyTorch's that the installed torch does not contain; quote its exact "
                       "words, or list another author's under foreign_message in "
                       f"{REFERENCES.relative_to(ROOT)}:\n" + "\n".join(wrong))


def test_every_foreign_message_is_quoted_and_not_pytorchs():
    quoted = {message for page, block, in_without in _page_blocks() for message in messages_in(block, in_without)}
    for entry in references().get("foreign_message", []):
        assert entry.get("author") and entry.get("checked"), f"{entry['text']!r}: say who writes it and how checked"
        assert entry["text"] in quoted, f"foreign_message {entry['text']!r} is quoted on no guide page: remove it"
        assert not all(in_torch(fragment) for fragment in fragments(entry["text"])), (
            f"{entry['text']!r} is in torch after all: remove it from foreign_message")


def test_every_file_of_pytorch_a_page_names_exists_and_every_line_reference_is_verified():
    listed_files = {entry["path"] for entry in references().get("source_file", [])}
    listed_lines = {(entry["path"], tuple(entry["lines"])): entry for entry in references().get("source_line", [])}
    problems: list[str] = []
    used_lines: set[tuple[str, tuple[int, ...]]] = set()
    for page, cell in _page_cells():
        for path, lines in file_references(cell):
            if not path:
                problems.append(f"{page}: a line reference ({lines[0]}) names no file before it in its cell")
                continue
            installed = torch_file(path)
            if installed is None and path not in listed_files:
                problems.append(f"{page}: `{path}` is not in the installed torch nor listed under source_file")
            if not lines:
                continue
            entry = listed_lines.get((path, lines))
            used_lines.add((path, lines))
            if entry is None:
                problems.append(f"{page}: {path} lines {lines[0]}–{lines[-1]} are not listed under source_line")
            elif installed is not None:
                file_lines = installed.read_text().splitlines()
                expected = entry["contains"]
                if isinstance(expected, list) and len(expected) == len(lines):  # one text per named line
                    pairs = [(file_lines[line - 1] if line <= len(file_lines) else "", text)
                             for line, text in zip(lines, expected)]
                else:
                    pairs = [("\n".join(file_lines[lines[0] - 1:lines[-1]]), expected)]
                if not all(text in found for found, text in pairs):
                    problems.append(f"{page}: {path} lines {lines[0]}–{lines[-1]} no longer contain "
                                    f"{expected!r} in the installed torch")
    stale = sorted(f"{path} {lines}" for path, lines in listed_lines.keys() - used_lines)
    assert not problems, "\n".join(problems)
    assert not stale, f"source_line entries no page refers to: {stale}"


def test_every_issue_or_pull_request_a_page_names_is_in_the_verified_list():
    listed = {entry["ref"]: entry for entry in references().get("issue", [])}
    problems: list[str] = []
    named: set[str] = set()
    for page, block, _ in _page_blocks():
        for loose in _LOOSE_ISSUE.finditer(block):
            problems.append(f"{page}: write {loose.group(0)!r} as owner/repo#N")
        for reference in issue_references(block):
            named.add(reference)
            if reference not in listed:
                problems.append(f"{page}: {reference} is not in {REFERENCES.relative_to(ROOT)}")
    for reference, entry in listed.items():
        if not entry.get("title") or not entry.get("state") or not entry.get("page_says"):
            problems.append(f"{reference}: the list must give its title, its state and what the page says")
    unused = sorted(listed.keys() - named)
    assert not problems, "\n".join(problems)
    assert not unused, f"issues listed but named on no guide page: {unused}"
