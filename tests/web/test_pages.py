"""The HTML pages: what a visitor gets before any script runs."""

from __future__ import annotations

import re

from app.catalog import load_catalog


def test_index_has_one_card_per_scenario_and_one_for_own_code(real_client):
    html = real_client.get("/").text
    for name, scenario in load_catalog().items():
        assert f'href="/scenarios/{name}"' in html
        assert scenario.title.split("`")[0] in html
    card = html.split('id="own-code-card"')[1].split("</li>")[0]
    assert 'href="/own-code"' in card and "paste or upload" in card
    assert "Not available" not in card


def test_index_cards_show_title_and_question_with_code_marked(client):
    html = client.get("/").text
    assert "A linear layer used twice" in html
    assert "does the weight get two gradient terms?" in html


def test_scenario_page_has_narration_numbered_source_and_controls(client):
    response = client.get("/scenarios/tiny")
    assert response.status_code == 200
    html = response.text
    # narration: the question shown, the answer behind a <details> for the teacher to reveal
    assert "<strong>Question:</strong> does the weight get two gradient terms?" in html
    assert '<details class="answer"><summary>Show the answer</summary>' in html
    assert "summed into <code>.grad</code>" in html
    # one <li> per source line, numbered by id so the page can highlight node.line
    lines = re.findall(r'<li id="L(\d+)" data-line="\1">', html)
    source = (client.app.state.scenarios_dir / "tiny.py").read_text().splitlines()
    assert [int(n) for n in lines] == list(range(1, len(source) + 1))
    # variants as radio buttons with their descriptions; options as selects with their choices
    assert re.search(r'<input type="radio" name="variant" value="twice"\s+checked>', html)
    assert "the layer applied once" in html
    assert re.search(r'<select name="opt-scale" data-option="scale"', html)
    assert '<option value="2" >2</option>' in html
    # scripts and styles from this host only
    for url in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert not url.startswith("//") and (url.startswith("/") or url.startswith("http://testserver/")
                                              or url.startswith("#")), url


def test_scenario_page_source_is_escaped_and_highlighted(client):
    html = client.get("/scenarios/tiny").text
    assert '<span class="tok-keyword">import</span> argparse' in html
    assert "&#34;twice&#34;" in html  # a string literal, escaped
    assert "<script>" not in html.split('id="source"')[1].split("</ol>")[0]


def test_unknown_scenario_page_is_404_with_the_list(client):
    response = client.get("/scenarios/nope")  # a page: the error page (error_handler.py)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "No such scenario" in response.text and "tiny" in response.text


def test_own_code_page_has_the_form_and_says_what_the_sandbox_is(client):
    response = client.get("/own-code")
    assert response.status_code == 200
    html = response.text
    assert '<textarea id="source"' in html and 'type="file" id="file" accept=".py' in html
    assert '<select id="device"' in html
    assert re.search(r'<button type="submit" id="run" class="run-button"\s*>', html)  # enabled
    assert 'id="refused"' not in html and 'id="token"' not in html
    # this test app skips the self-test: the page says so, and that others cannot upload
    assert 'data-state="off"' in html and "The sandbox self-test is switched off" in html
    assert "only for visitors on the server's own machine" in html


def test_static_files_and_vendored_library_with_licence(client):
    assert client.get("/static/css/app.css").status_code == 200
    js = client.get("/static/js/trace_page.js")
    assert js.status_code == 200 and "import" in js.text
    vendor = "/static/vendor/svg-pan-zoom-3.6.2/"
    assert "svgPanZoom" in client.get(vendor + "svg-pan-zoom.min.js").text
    assert "Redistribution and use" in client.get(vendor + "LICENSE").text
    assert "3.6.2" in client.get(vendor + "VERSION").text


def test_pages_name_their_files_by_content_and_browsers_keep_them(client):
    """static_assets.py: a page's files are under /static/v/<hash>/, kept by a browser without
    asking again; the hash follows the files' bytes, and the plain /static/ is revalidated."""
    import hashlib

    from app.resources import resource_dir

    page = client.get("/own-code").text
    found = set(re.findall(r'="(?:https?://[^/"]+)?/static/v/([0-9a-f]{12})/js/own_code\.js"',
                           page))
    assert len(found) == 1, page[:2000]
    (version,) = found
    served = client.get(f"/static/v/{version}/js/own_code.js")
    assert served.headers["cache-control"] == "public, max-age=31536000, immutable"
    plain = client.get("/static/js/own_code.js")
    assert "immutable" not in plain.headers.get("cache-control", "")
    assert served.content == plain.content == (
        resource_dir("static") / "js" / "own_code.js").read_bytes()
    assert client.get("/static/v/000000000000/js/own_code.js").status_code == 404
    # the name is a hash of every file and its path: recomputed here, independently
    folder = resource_dir("static")
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    assert version == digest.hexdigest()[:12]


def test_page_scripts_load_nothing_from_another_host(client):
    """Every ES module imports by relative path only, and fetches only /api."""
    from app.resources import resource_dir

    for path in (resource_dir("static") / "js").glob("*.js"):
        text = path.read_text()
        # import/export statements only: a sentence such as '" (called from ", ...' is text
        for spec in re.findall(r'^\s*(?:import|export)\b[^;]*?\bfrom\s+"([^"]+)"', text, re.M):
            assert spec.startswith("./"), (path.name, spec)
        urls = re.findall(r"https?://[^\s\"'`]+", text)
        # XML namespace names are identifiers, never fetched
        assert all(u.startswith("http://www.w3.org/") for u in urls), (path.name, urls)


def test_compare_page_has_one_column_per_variant(client):
    html = client.get("/scenarios/tiny/compare").text
    columns = re.findall(r'<section class="compare-card" data-variant="(\w+)"', html)
    assert columns == ["twice", "once"]
    assert 'href="/scenarios/tiny?variant=once"' in html


def test_compare_page_of_a_scenario_without_variants_says_so(real_client):
    html = real_client.get("/scenarios/reused_layer/compare").text
    assert "nothing to compare" in html
    assert real_client.get("/scenarios/nope/compare").status_code == 404


def test_parallel_requests_read_the_catalogue_safely(client):
    """The compare page asks for every variant at once; the catalogue must survive that."""
    from concurrent.futures import ThreadPoolExecutor

    def get(_):
        return client.get("/api/scenarios/tiny").status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(get, range(64))) == {200}


def test_catalogue_is_read_again_when_a_scenario_changes(client, tiny_dir):
    (tiny_dir / "extra.py").write_text('"""An extra scenario\n\nQuestion: new?\n"""\n')
    try:
        assert "extra" in [s["name"] for s in client.get("/api/scenarios").json()]
    finally:
        (tiny_dir / "extra.py").unlink()
    assert "extra" not in [s["name"] for s in client.get("/api/scenarios").json()]
