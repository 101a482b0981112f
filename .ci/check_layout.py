"""Render built Sphinx pages in headless Chromium and check their layout.

At a 1280 px wide window, for each page named:

* nothing is cut off sideways: the page is no wider than the window, and
  no table is wider than the box that holds it (Furo puts every table in
  a box that scrolls sideways: what does not fit is hidden until scrolled);
* every SVG image's text is at least ``MIN_PX`` px high as drawn: its
  ``font-size`` times the drawn width over the SVG's ``viewBox`` width.

Usage: ``python .ci/check_layout.py HTML_DIR PAGE.html...``; exit status 0
when every check holds, 1 when one fails, 77 when no Chromium is found
(``chromium`` from Debian's package of that name).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import List

WIDTH = 1280
MIN_PX = 10.0

#: Runs in the page once it has loaded; writes what it measured into the
#: DOM, which Chromium's --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", function () {
  var out = {scrollWidth: document.documentElement.scrollWidth,
             tables: [], images: []};
  document.querySelectorAll(".table-wrapper").forEach(function (box) {
    if (box.scrollWidth > box.clientWidth + 1)
      out.tables.push({id: box.id || box.className, width: box.scrollWidth,
                       box: box.clientWidth});
  });
  document.querySelectorAll("img").forEach(function (img) {
    if (/\\.svg$/.test(img.getAttribute("src")))
      out.images.push({src: img.getAttribute("src"),
                       width: img.getBoundingClientRect().width});
  });
  var pre = document.createElement("pre");
  pre.id = "layout-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return ""


def measure(browser: str, page: str) -> dict:
    """Load a copy of ``page`` (beside it, so its links resolve) with the
    probe added, and return what the probe measured."""
    with open(page, encoding="utf-8") as f:
        html = f.read()
    fd, probe = tempfile.mkstemp(suffix=".html", dir=os.path.dirname(page))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html.replace("</body>", PROBE + "</body>"))
        with tempfile.TemporaryDirectory() as profile:
            out = subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu",
                 "--hide-scrollbars", f"--user-data-dir={profile}",
                 f"--window-size={WIDTH},2000", "--virtual-time-budget=5000",
                 "--dump-dom", "file://" + os.path.abspath(probe)],
                capture_output=True, text=True, timeout=120).stdout
    finally:
        os.unlink(probe)
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', out, re.S)
    if not found:
        raise RuntimeError(f"{page}: the probe wrote nothing (Chromium's "
                           f"output ends {out[-300:]!r})")
    return json.loads(found.group(1).replace("&quot;", '"'))


def svg_text_scale(path: str) -> tuple:
    """(viewBox width, smallest font-size) of an SVG file."""
    with open(path, encoding="utf-8") as f:
        svg = f.read()
    box = re.search(r'viewBox="[\d.]+ [\d.]+ ([\d.]+) [\d.]+"', svg)
    sizes = [float(s) for s in re.findall(r"font-size:\s*([\d.]+)px", svg)]
    if not box or not sizes:
        raise RuntimeError(f"{path}: no viewBox or no text with a font-size "
                           "(is the text drawn as paths?)")
    return float(box.group(1)), min(sizes)


def problems(root: str, pages: List[str], browser: str) -> List[str]:
    found = []
    for name in pages:
        page = os.path.join(root, name)
        seen = measure(browser, page)
        if seen["scrollWidth"] > WIDTH:
            found.append(f"{name}: the page is {seen['scrollWidth']} px wide "
                         f"at a {WIDTH} px window")
        for t in seen["tables"]:
            found.append(f"{name}: table {t['id']} is {t['width']} px wide in "
                         f"a box of {t['box']} px (cut off at {WIDTH} px)")
        for img in seen["images"]:
            view, size = svg_text_scale(os.path.join(root, img["src"]))
            px = size * img["width"] / view
            status = "ok" if px >= MIN_PX else "too small"
            print(f"{name}: {img['src']}: drawn {img['width']:.0f} px wide, "
                  f"smallest text {px:.1f} px ({status})")
            if px < MIN_PX:
                found.append(f"{name}: {img['src']}'s smallest text is drawn "
                             f"{px:.1f} px high (< {MIN_PX} px)")
    return found


def main() -> int:
    if len(sys.argv) < 3 or not os.path.isdir(sys.argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    browser = chromium()
    if not browser:
        print("check_layout: no Chromium found (apt-get install chromium)")
        return 77
    found = problems(sys.argv[1], sys.argv[2:], browser)
    for line in found:
        print(line)
    print(f"check_layout: {len(sys.argv) - 2} page(s) at {WIDTH} px, "
          f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
