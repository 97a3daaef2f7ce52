"""Drive featurepipe's web pages in headless Chromium (Playwright, Debian's
chromium) and print what a person would have seen, as one JSON object.

    browser.py items    URL       the items page: map, table, selection both ways
    browser.py editor   URL KEY [PNG] create, move, edit, 422, conflict (412), delete
    browser.py polygon  URL KEY   draw a polygon, give it its key, save it
    browser.py hostile  URL ID KEY  a hostile property value stays text
    browser.py shots    URL KEY DIR   the screenshots of docs/browser.md

Used by tests/it/browser.rs, which checks the output and the database. Every
wait is for something on the page (a state, a text); none is a sleep.
"""

import json
import os
import sys
import tempfile
import urllib.request

from playwright.sync_api import expect, sync_playwright

CHROMIUM = os.environ.get("FEATUREPIPE_TEST_CHROMIUM", "/usr/bin/chromium")
# The machine has no network: nothing may try to reach out. The flags are
# those of tests/it/chromium.rs too.
with open(os.path.join(os.path.dirname(__file__), "chromium-flags.txt")) as flags:
    FLAGS = flags.read().split()
BLUE = (28, 95, 179)  # features
ORANGE = (232, 137, 12)  # the selected feature

# Pixels of the map's canvases near a colour: their count, the first one
# (the top of the topmost feature) and their centre.
PAINTED = """([r, g, b]) => {
  let count = 0, first = null, x = 0, y = 0;
  for (const canvas of document.querySelectorAll('#map canvas')) {
    const box = canvas.getBoundingClientRect();
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] > 200 && Math.abs(data[i] - r) < 20 && Math.abs(data[i + 1] - g) < 20
          && Math.abs(data[i + 2] - b) < 20) {
        const p = i / 4;
        const at = [box.left + (p % canvas.width) * box.width / canvas.width,
                    box.top + Math.floor(p / canvas.width) * box.height / canvas.height];
        count++;
        x += at[0];
        y += at[1];
        if (!first) first = at;
      }
    }
  }
  return { count, first, centre: count ? [x / count, y / count] : null };
}"""


class Browser:
    """Chromium with a fresh profile; records page errors and CSP violations."""

    def __enter__(self):
        self.playwright = sync_playwright().start()
        self.profile = tempfile.TemporaryDirectory()
        self.context = self.playwright.chromium.launch_persistent_context(
            self.profile.name,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1100, "height": 900},
        )
        self.context.set_default_timeout(20000)
        self.problems = []
        return self

    def page(self, url):
        page = self.context.new_page()
        page.on("pageerror", lambda e: self.problems.append("page error: " + str(e)))
        page.on(
            "console",
            lambda m: self.problems.append("console: " + m.text)
            if m.type == "error" and "favicon" not in m.text and "Failed to load resource" not in m.text
            else None,
        )
        page.goto(url)
        page.wait_for_selector("#map[data-state=ready]")
        expect(page.locator("#rights")).not_to_have_text("")
        return page

    def __exit__(self, *exc):
        self.context.close()
        self.playwright.stop()
        self.profile.cleanup()


def painted(page, colour):
    """The pixels of `colour`, once the map shows some (it draws on the next
    frame). The pointer first leaves the features: OpenLayers draws a vertex
    handle over the feature under it."""
    box = page.locator("#map").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)
    page.wait_for_function("(colour) => (" + PAINTED + ")(colour).count > 0", arg=list(colour))
    return page.evaluate(PAINTED, list(colour))


def use_key(page, key):
    page.fill("#token", key)
    page.click("#credential button[type=submit]")
    expect(page.locator("#rights")).to_have_text("You may edit these features.")


def items(url):
    with Browser() as browser:
        page = browser.page(url)
        blue = painted(page, BLUE)
        seen = {
            "count": page.get_attribute("#map", "data-count"),
            "rows": page.locator("#features tbody tr").count(),
            "headers": page.locator("#features thead th").all_text_contents(),
            "blue_pixels": blue["count"],
            "editor_hidden": page.locator("#editor").is_hidden(),
        }
        # A click on a feature (just below the top of the topmost) selects its row ...
        page.mouse.click(blue["first"][0], blue["first"][1] + 4)
        expect(page.locator("#features tbody tr.selected")).to_have_count(1)
        seen["clicked_feature_row"] = page.get_attribute("#features tbody tr.selected", "data-id")
        # ... and a click on a row selects its feature (drawn in orange).
        page.click("#features tbody tr:nth-child(3) td:nth-child(2)")
        expect(page.locator("#features tbody tr:nth-child(3)")).to_have_class("selected")
        seen["selected_row"] = page.get_attribute("#features tbody tr.selected", "data-id")
        seen["orange_pixels"] = painted(page, ORANGE)["count"]
        # The keyboard does what the click does.
        page.focus("#features tbody tr:nth-child(5)")
        page.keyboard.press("Enter")
        expect(page.locator("#features tbody tr:nth-child(5)")).to_have_class("selected")
        seen["entered_row"] = page.get_attribute("#features tbody tr.selected", "data-id")
        seen["problems"] = browser.problems
        return seen


def fill(page, name, value):
    page.fill(f"#fields [name={name}]", value)


def status_is(page, text):
    expect(page.locator("#status")).to_have_text(text)


def second_client(url, id, properties):
    """Someone else changes the feature, with no If-Match."""
    body = json.dumps({"properties": properties}).encode()
    request = urllib.request.Request(
        f"{url}/{id}", data=body, method="PATCH",
        headers={"Content-Type": "application/merge-patch+json", "Authorization": "Bearer " + KEY},
    )
    with urllib.request.urlopen(request) as response:
        return response.status


def editor(url, key, shot=None):
    global KEY
    KEY = key
    items_url = url.split("?")[0]
    with Browser() as browser:
        page = browser.page(url)
        seen = {"read_only_editor_hidden": page.locator("#editor").is_hidden()}
        use_key(page, key)
        # Create: a point in the middle of the map, with properties.
        page.click("#create")
        # Drawing starts once the schema is loaded: wait for it, not a fixed time.
        expect(page.locator("#hint")).to_contain_text("Click on the map")
        box = page.locator("#map").bounding_box()
        centre = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.click(*centre)
        expect(page.locator("#form-title")).to_have_text("New feature")
        fill(page, "name", "made in a browser")
        fill(page, "pop", "42")
        page.click("#save")
        expect(page.locator("#status")).to_contain_text("Saved feature ")
        id = page.locator("#form-title").text_content().removeprefix("Feature ")
        seen["created"] = id
        seen["created_row"] = page.locator(f'#features tr[data-id="{id}"] td[data-key=name]').text_content()
        # Move it: drag the (selected, so orange) point 60 px to the east, then save.
        centre = painted(page, ORANGE)["centre"]
        page.mouse.move(*centre)
        page.mouse.down()
        page.mouse.move(centre[0] + 30, centre[1], steps=5)
        page.mouse.move(centre[0] + 60, centre[1], steps=5)
        page.mouse.up()
        expect(page.locator("#geometry-note")).to_have_text("The geometry has changed: save to keep it.")
        page.click("#save")
        status_is(page, f"Saved feature {id}.")
        # A 422: each error at its field.
        fill(page, "pop", "many")
        page.click("#save")
        expect(page.locator('.field-error[data-for="pop"]')).not_to_have_text("")
        seen["pop_error"] = page.locator('.field-error[data-for="pop"]').text_content()
        seen["status_422"] = page.locator("#status").text_content()
        # Edit a property and save.
        fill(page, "pop", "43")
        fill(page, "name", "edited once")
        page.click("#save")
        status_is(page, f"Saved feature {id}.")
        seen["edited_row"] = page.locator(f'#features tr[data-id="{id}"] td[data-key=name]').text_content()
        # Someone else changes it; our next save is refused with 412.
        seen["second_client"] = second_client(items_url, id, {"name": "changed by someone else"})
        fill(page, "name", "edited twice")
        page.click("#save")
        expect(page.locator("#conflict")).to_be_visible()
        seen["conflict_status"] = page.locator("#status").text_content()
        page.click("#compare")
        expect(page.locator("#versions")).to_be_visible()
        seen["versions"] = [
            row.locator("td").all_text_contents() for row in page.locator("#versions tbody tr").all()
        ]
        if shot:
            page.screenshot(path=shot, full_page=True)
        page.click("#reload")
        status_is(page, f"Reloaded feature {id} as it is saved now.")
        seen["reloaded_name"] = page.input_value("#fields [name=name]")
        seen["reloaded_row"] = page.locator(f'#features tr[data-id="{id}"] td[data-key=name]').text_content()
        # Delete it, with confirmation.
        page.click("#delete")
        page.click("#confirm-delete")
        status_is(page, f"Deleted feature {id}.")
        seen["rows_with_id"] = page.locator(f'#features tr[data-id="{id}"]').count()
        seen["problems"] = browser.problems
        return seen


def polygon(url, key):
    with Browser() as browser:
        page = browser.page(url)
        use_key(page, key)
        page.click("#create")
        # Drawing starts once the schema is loaded: wait for it, not a fixed time.
        expect(page.locator("#hint")).to_contain_text("Click on the map")
        expect(page.locator("#hint")).to_have_text("Click on the map to draw it; double-click to finish.")
        box = page.locator("#map").bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.click(x - 80, y + 60)
        page.mouse.click(x + 80, y + 60)
        page.mouse.dblclick(x, y - 60)
        expect(page.locator("#form-title")).to_have_text("New feature")
        # The key is the client's to choose here: the form asks for it.
        fields = page.locator("#fields [name]").evaluate_all("inputs => inputs.map(i => i.name)")
        fill(page, "gid", "2")
        page.click("#save")
        status_is(page, "Saved feature 2.")
        return {
            "fields": fields,
            "rows": page.locator("#features tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)"),
            "problems": browser.problems,
        }


def hostile(url, id, key):
    with Browser() as browser:
        seen = {}
        for name, address in [("items", url), ("feature", f"{url.split('?')[0]}/{id}?f=html")]:
            page = browser.page(address)
            cell = page.locator(f'#features tr[data-id="{id}"] td[data-key=name]')
            seen[name] = {
                "text": cell.text_content(),
                "elements_in_cell": cell.evaluate("c => c.children.length"),
                "pwned": page.evaluate("window.pwned === undefined ? null : window.pwned"),
            }
        # The editor shows it as the value of an input, and the script
        # writes the row again from the feature it read.
        use_key(page, key)
        page.click(f'#features tr[data-id="{id}"] td[data-key=name]')
        expect(page.locator("#form-title")).to_have_text(f"Feature {id}")
        seen["input"] = page.input_value("#fields [name=name]")
        seen["text_after_edit"] = cell.text_content()
        seen["pwned_after_edit"] = page.evaluate("window.pwned === undefined ? null : window.pwned")
        seen["problems"] = browser.problems
        return seen


def shots(url, key, folder):
    """The items page, and the editor showing a conflict."""
    with Browser() as browser:
        page = browser.page(url)
        page.screenshot(path=os.path.join(folder, "items-page.png"))
    return editor(url, key, os.path.join(folder, "editor-conflict.png"))


def apidocs(url):
    """The API documentation page, under its Content-Security-Policy: Swagger
    UI renders the document, with no page error nor CSP violation."""
    with Browser() as browser:
        page = browser.context.new_page()
        page.on("pageerror", lambda e: browser.problems.append("page error: " + str(e)))
        page.on(
            "console",
            lambda m: browser.problems.append("console: " + m.text)
            # The favicon's 404 says only "Failed to load resource".
            if m.type == "error" and "Failed to load resource" not in m.text
            else None,
        )
        page.on(
            "requestfailed", lambda r: browser.problems.append("request failed: " + r.url)
        )
        page.on(
            "response",
            lambda r: browser.problems.append(f"{r.status}: {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None,
        )
        page.goto(url)
        page.wait_for_selector(".swagger-ui .info .title")
        page.wait_for_selector(".opblock")
        return {
            "title": page.locator(".swagger-ui .info .title").first.inner_text(),
            "operations": page.locator(".opblock").count(),
            "problems": browser.problems,
        }


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    commands = {"items": items, "editor": editor, "polygon": polygon, "hostile": hostile, "shots": shots, "apidocs": apidocs}
    print(json.dumps(commands[command](*args)))
