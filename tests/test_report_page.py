"""The report page in a real headless Chromium (Debian's chromium + chromium-driver, via selenium).

Locally the browser test skips when chromium is missing; with CI set it fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import zlib

import numpy as np
import pytest

from converter.legalize.check import check_targets
from converter.matrix import load_matrix
from converter.report.matrix_page import build_matrix_page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def page(tmp_path_factory, zoo_model):
    m = load_matrix()
    model = zoo_model("detector")
    checks = check_targets(model, m.resolve_targets("all", "all"), m)
    html = build_matrix_page(m, checks, model_name="detector")
    path = tmp_path_factory.mktemp("page") / "matrix.html"
    path.write_text(html)
    return m, model, checks, html, path


def test_page_is_self_contained_and_deterministic(page):
    m, model, checks, html, _ = page
    for needle in ("http://", "<link", "src="):
        assert needle not in html
    # The only URLs are the citation links (anchors, never loaded): cited lines at a full commit.
    urls = set(re.findall(r"https://[^\"\\ ]+", html))
    assert urls and urls == {c.url for c in m.citations().values()} & urls
    assert all(re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+#L\d+(-L\d+)?", u) for u in urls)
    assert build_matrix_page(m, checks, model_name="detector") == html


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        if os.environ.get("CI"):
            pytest.fail(f"chromium/chromedriver not installed ({CHROMIUM}, {DRIVER})")
        pytest.skip("chromium not installed")
    webdriver = pytest.importorskip("selenium.webdriver") if not os.environ.get("CI") else __import__(
        "selenium.webdriver", fromlist=["webdriver"])
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _visible_rows(driver, table="matrix"):
    return driver.execute_script(
        f"return Array.from(document.querySelectorAll('#{table} tbody tr'))"
        ".filter(r => r.style.display !== 'none').map(r => r.cells[0].textContent)")


def _set(driver, element_id, value):
    driver.execute_script(
        "var e=document.getElementById(arguments[0]); if(e.type==='checkbox'){e.checked=arguments[1];}"
        "else{e.value=arguments[1];} e.dispatchEvent(new Event('change'));", element_id, value)


def _png_pixels(png: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) with zlib + numpy."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        chunk = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * channels)
    out = np.zeros((height, width * channels), np.int32)
    prev = np.zeros(width * channels, np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        cur = np.zeros_like(line)
        for x in range(len(line)):
            a = cur[x - channels] if x >= channels else 0
            b, c = prev[x], (prev[x - channels] if x >= channels else 0)
            if f == 0:
                pred = 0
            elif f == 1:
                pred = a
            elif f == 2:
                pred = b
            elif f == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[x] = (line[x] + pred) & 0xFF
        out[y], prev = cur, cur
    return out.reshape(height, width, channels)


def test_page_in_headless_chromium(page, browser, tmp_path):
    m, model, checks, _, path = page
    browser.get(path.as_uri())
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []

    all_ops = m.ops()
    assert len(_visible_rows(browser)) == len(all_ops)
    assert browser.find_element("id", "count").text == f"{len(all_ops)} of {len(all_ops)} ops"

    _set(browser, "f-op", "conv")
    assert _visible_rows(browser) == [op for op in all_ops if "conv" in op.lower()] == ["Conv", "ConvTranspose"]
    _set(browser, "f-op", "")

    _set(browser, "f-fw", "tnn")
    _set(browser, "f-hw", "rknpu")
    _set(browser, "f-status", "no")
    expected = [op for op in all_ops if m.op_status("tnn", "rknpu", op) == "unsupported"]
    assert _visible_rows(browser) == expected and "ConvTranspose" in expected
    visible_cols = browser.execute_script(
        "return Array.from(document.querySelectorAll('#matrix thead tr:nth-child(2) th'))"
        ".filter(t => t.style.display !== 'none').map(t => t.textContent)")
    assert visible_cols == ["rknpu"]
    cell = browser.find_element("css selector", "#matrix tbody tr[data-op='ConvTranspose'] td.cell:not([style*='none'])")
    table = "Tencent/TNN@f0cb081:doc/en/user/support_en.md#L65-L190"
    assert f"source: {table}" in cell.get_attribute("title")
    cell.click()
    assert "ConvTranspose on tnn/rknpu: unsupported" in browser.find_element("id", "details").text
    links = {a.text: a.get_attribute("href") for a in browser.find_elements("css selector", "#details a.cite")}
    assert links == {table: m.citation(table).url}
    assert links[table] == ("https://github.com/Tencent/TNN/blob/f0cb08129a05c5b60f08e4ef66042a54a883a56a/"
                            "doc/en/user/support_en.md#L65-L190")

    for element, value in (("f-fw", ""), ("f-hw", ""), ("f-status", "")):
        _set(browser, element, value)
    _set(browser, "f-model", True)
    model_ops = sorted({n.op_type for n in model.graph.node})
    assert _visible_rows(browser) == model_ops
    assert len(_visible_rows(browser, "nodes")) == len(model.graph.node)
    summary = browser.find_element("id", "model-summary").text
    assert checks[0].summary() in summary and checks[-1].summary() in summary

    pixels = _png_pixels(browser.get_screenshot_as_png())
    assert pixels.shape[0] > 200 and pixels.shape[1] > 200
    colors = np.unique(pixels[..., :3].reshape(-1, 3)[::97], axis=0)
    assert len(colors) > 10, "screenshot looks blank"
    assert (pixels[..., :3].std(axis=(0, 1)) > 5).all()
