"""`rubricrl healthbench fetch` against a copy of OpenAI's store served on this machine: the files land under the
folder as served (Professional taken out of its zip), checked and counted, with their sha256 in the manifest, and
`eval --rubrics` reads them; a rerun downloads nothing; a download cut short or garbled is one line and leaves no
file."""

import hashlib
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from commands.main import main
from grading.dataset import load_rubric_rows
from grading.healthbench_files import FILES, MANIFEST

pytestmark = pytest.mark.pure

SAMPLE = Path(__file__).parent / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
LINES = SAMPLE.read_bytes().splitlines(keepends=True)

PROFESSIONAL = [
    {
        "id": f"pro-{i}",
        "conversation": {"messages": [{"role": "user", "content": f"Draft a discharge note for patient {i}."}]},
        "rubric_items": [
            {"criterion_text": "States the discharge diagnosis.", "points": 8},
            {"criterion_text": "Invents a medication the chart does not list.", "points": -6},
        ],
        "use_case": "writing",
        "type": "good_faith",
        "difficulty": "typical",
        "specialty": "internal_medicine",
        "physician_response": f"Discharge note {i}.",
    }
    for i in range(3)
]


def professional_zip(rows=PROFESSIONAL) -> bytes:
    """assets.zip as the store serves it: the data file beside the dataset's card and licence."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("README.md", "HealthBench Professional")
        archive.writestr("LICENSE", "MIT")
        archive.writestr(FILES["professional"].member, "".join(json.dumps(row) + "\n" for row in rows))
    return out.getvalue()


STORE = {
    FILES["regular"].path: b"".join(LINES[:12]),
    FILES["hard"].path: b"".join(LINES[12:20]),
    FILES["consensus"].path: b"".join(LINES[20:]),
    FILES["professional"].path: professional_zip(),
}


class Store(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    announced: dict[str, int] = {}
    """A path's Content-Length when it is not the body's: the connection closes before the rest."""
    requests: list[str] = []

    def do_GET(self):
        path = self.path.removeprefix("/simple-evals/")
        self.requests.append(path)
        if path not in self.files:
            self.send_error(404)
            return
        body = self.files[path]
        self.send_response(200)
        self.send_header("Content-Length", str(self.announced.get(path, len(body))))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def store():
    """A store serving STORE under /simple-evals/; its handler class, to change what it serves."""
    handler = type("TestStore", (Store,), {"files": dict(STORE), "announced": {}, "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/simple-evals"
    yield handler
    server.shutdown()
    server.server_close()


def fetch(store, out: Path, *names: str) -> int:
    return main(["healthbench", "fetch", *names, "--output-dir", str(out), "--source", store.url])


def test_every_file_lands_checked_counted_and_hashed_and_eval_reads_it(store, tmp_path, capsys):
    assert fetch(store, tmp_path) == 0
    err = capsys.readouterr().err
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    member = zipfile.ZipFile(io.BytesIO(STORE[FILES["professional"].path])).read(FILES["professional"].member)
    expected = {"regular": (12, STORE[FILES["regular"].path]), "hard": (8, STORE[FILES["hard"].path])}
    expected |= {"consensus": (10, STORE[FILES["consensus"].path]), "professional": (3, member)}
    for name, (rows, data) in expected.items():
        written = tmp_path / FILES[name].file
        assert written.read_bytes() == data  # as served: the Professional file as it ships in the zip
        assert manifest[name]["rows"] == rows and f"{name}: {rows} rows" in err
        assert manifest[name]["sha256"] == hashlib.sha256(data).hexdigest()
        assert manifest[name]["url"] == f"{store.url}/{FILES[name].path}"
        assert len(load_rubric_rows(written)) == rows  # the loader `eval --rubrics` uses
    zip_hash = hashlib.sha256(STORE[FILES["professional"].path]).hexdigest()
    assert manifest["professional"]["archive_sha256"] == zip_hash
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([MANIFEST, *(spec.file for spec in FILES.values())])


def test_a_rerun_downloads_only_what_the_manifest_no_longer_matches(store, tmp_path, capsys):
    assert fetch(store, tmp_path, "hard", "professional") == 0
    (tmp_path / FILES["hard"].file).write_text("edited\n")
    store.requests.clear()
    assert fetch(store, tmp_path, "hard", "professional") == 0
    assert store.requests == [FILES["hard"].path]
    assert "professional: 3 rows, already in" in capsys.readouterr().err
    assert len(load_rubric_rows(tmp_path / FILES["hard"].file)) == 8


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("rubricrl: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_a_download_cut_short_is_one_line_and_leaves_no_file(store, tmp_path, capsys):
    store.announced[FILES["hard"].path] = len(STORE[FILES["hard"].path]) + 5000
    assert fetch(store, tmp_path, "hard") == 2
    size = len(STORE[FILES["hard"].path])
    assert one_error(capsys) == (
        f"rubricrl: error: {store.url}/{FILES['hard'].path}: the download stopped at {size:,} of {size + 5000:,} bytes"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, served, said",
    [
        ("hard", b"".join(LINES[12:14]) + LINES[14][:200] + b"\n", "line 3: not JSON"),
        ("consensus", LINES[20] + json.dumps({"prompt_id": "x", "prompt": []}).encode(), "line 2: 'prompt' is not"),
        ("professional", professional_zip([PROFESSIONAL[0], {"id": "p", "conversation": {}}]), "line 2: 'conversa"),
        ("professional", STORE[FILES["professional"].path][:300], "not a readable zip archive"),
    ],
)
def test_a_garbled_file_is_one_line_naming_the_line_and_leaves_no_file(store, tmp_path, capsys, name, served, said):
    store.files[FILES[name].path] = served
    assert fetch(store, tmp_path, name) == 2
    assert said in one_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_and_an_unknown_name_are_one_line(store, tmp_path, capsys):
    del store.files[FILES["consensus"].path]
    assert fetch(store, tmp_path, "consensus") == 2
    assert one_error(capsys).endswith(f"{FILES['consensus'].path}: HTTP 404 Not Found")
    assert fetch(store, tmp_path, "hardest") == 2
    assert "no HealthBench file 'hardest': choose from regular, hard, consensus, professional" in one_error(capsys)
