"""Starting from an image on the page, in a real browser against the app served here (tiny
pipeline, 64 px, 2 steps): a mask stroke painted with the mouse repaints only its area (every
pixel beyond the stroke's reach plus twice the mask's blur is the source's, exactly), the
result shown beside its source; a finger's stroke (touch) painting, not scrolling; the
eraser and Clear mask, each control by its accessible
name and by the keyboard; a gallery image's Edit; an image dropped or pasted; and, the image
removed, text-to-image as before; refusals beside their field."""

import hashlib
import io
import re

import numpy as np
import requests
from PIL import Image
from playwright.sync_api import Locator, Page, expect

from tests.imagegen.ui.conftest import TOKEN, WAIT_MS, screenshot
from tests.imagegen.ui.test_page import done, fill, jobs, open_ui
from tests.support.processes import AppServer

SIDE = 64


def source_png(width: int = SIDE, height: int = SIDE) -> bytes:
    """Noise: any pixel the model repaints differs from it."""
    pixels = np.random.default_rng(7).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def choose(page: Page, png: bytes, name: str = "house.png") -> Locator:
    """The image chosen with the Image field; the mask canvas once it is shown."""
    page.get_by_label("Image", exact=True).set_input_files(
        files=[{"name": name, "mimeType": "image/png", "buffer": png}]
    )
    return shown_mask(page)


def shown_mask(page: Page) -> Locator:
    mask = page.get_by_role("img", name="Mask", exact=True)
    expect(mask).to_be_visible()
    return mask


def paint(page: Page, *points: tuple[float, float]) -> None:
    """A mouse stroke through these points, in the image's pixels (their centres)."""
    page.locator("#mask").scroll_into_view_if_needed()
    box = page.locator("#mask").bounding_box()
    assert box
    width, height = page.locator("#mask").evaluate("c => [c.width, c.height]")

    def at(x: float, y: float) -> tuple[float, float]:
        return box["x"] + (x + 0.5) * box["width"] / width, box["y"] + (y + 0.5) * box[
            "height"
        ] / height

    page.mouse.move(*at(*points[0]))
    page.mouse.down()
    for point in points[1:]:
        page.mouse.move(*at(*point), steps=8)
    page.mouse.up()


def generate(page: Page, app: AppServer, prompt: str, **fields: str) -> dict:
    """Generate from the page; the record of the image it made."""
    fill(page, prompt=prompt, steps="2", **fields)
    page.get_by_role("button", name="Generate").click()
    done(page, prompt)
    return jobs(app, prompt)[0]["image"]


def fetched(app: AppServer, path: str) -> bytes:
    answer = requests.get(app.url(path), timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.content


def pixels(data: bytes, mode: str = "RGB") -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert(mode)).astype(int)


def distance_to_segment(shape: tuple[int, int], start, end) -> np.ndarray:
    """Each pixel centre's distance to the segment between two pixels' centres."""
    ys, xs = np.mgrid[0 : shape[0], 0 : shape[1]] + 0.5
    (x0, y0), (x1, y1) = (np.add(start, 0.5), np.add(end, 0.5))
    dx, dy = x1 - x0, y1 - y0
    t = np.clip(((xs - x0) * dx + (ys - y0) * dy) / (dx * dx + dy * dy), 0, 1)
    return np.hypot(xs - (x0 + t * dx), ys - (y0 + t * dy))


def distance_to_marked(mask: np.ndarray) -> np.ndarray:
    """Each pixel's distance to the nearest marked (non-black) pixel of the mask."""
    marked = np.argwhere(mask > 0)
    grid = np.argwhere(np.ones_like(mask, dtype=bool))
    nearest = np.sqrt(((grid[:, None, :] - marked[None, :, :]) ** 2).sum(-1)).min(1)
    return nearest.reshape(mask.shape)


def test_a_stroke_painted_with_the_mouse_repaints_only_its_area(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    png = source_png()
    mask = choose(page, png)
    assert mask.evaluate("c => [c.width, c.height]") == [SIDE, SIDE]  # the image's own size
    page.get_by_label("Brush size").fill("8")
    start, end = (16, 32), (44, 32)
    paint(page, start, end)
    screenshot(page, "30-edit-stroke")
    prompt = "a red stripe across noise"
    record = generate(page, ui_app, prompt, strength="0.9", mask_blur="2")

    edit = record["parameters"]["edit"]
    assert (edit["strength"], edit["mask_blur"]) == (0.9, 2)
    assert fetched(ui_app, edit["source"]["url"]) == png  # the file as chosen
    sent = pixels(fetched(ui_app, edit["mask"]["url"]), "L")
    assert sent.shape == (SIDE, SIDE)  # a PNG the image's size
    assert (sent[32, 16:45] == 255).all()  # white where painted
    reach = distance_to_segment(sent.shape, start, end)
    assert (sent[reach > 4 + 1] == 0).all()  # black beyond the brush (radius 4, an edge pixel)

    source, result = pixels(png), pixels(fetched(ui_app, f"/images/{record['id']}.png"))
    assert result.shape == source.shape
    kept = distance_to_marked(sent) > 2 * 2
    assert kept.sum() > 2000
    assert (result[kept] == source[kept]).all()  # beyond the stroke and 2 x mask_blur: exact
    assert (result[~kept] != source[~kept]).any()  # the stroke's area repainted

    card = page.locator("#gallery li").first
    expect(card.locator(".params")).to_contain_text("edited: strength 0.9, masked")
    beside = card.get_by_role("img", name=f"Source: {prompt}", exact=True)
    expect(beside).to_have_attribute("src", re.compile("^blob:"))
    assert beside.evaluate("i => i.decode().then(() => i.naturalWidth)") == SIDE
    # Each of the two is captioned beneath it, on the card and in the larger view.
    expect(card.locator("figure:has(button.view) figcaption")).to_have_text("Result")
    expect(card.locator("figure:has(img.source) figcaption")).to_have_text("Source")
    card.get_by_role("button", name=f"View larger: {prompt}").click()
    expect(page.locator("#viewer-source")).to_be_visible()
    expect(page.locator("#viewer-source")).to_have_accessible_name(f"Source: {prompt}")
    viewer = page.locator("#viewer")
    expect(viewer.locator("figure:has(#viewer-image) figcaption")).to_have_text("Result")
    expect(viewer.locator("figure:has(#viewer-source) figcaption")).to_have_text("Source")
    screenshot(page, "31-edit-result", full_page=True)
    page.keyboard.press("Escape")


def test_the_eraser_and_clear_by_name_and_keyboard(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    choose(page, source_png())
    for name in ("Image", "Mask", "Brush size", "Strength", "Mask blur"):
        expect(page.get_by_label(name, exact=True)).to_be_visible()
    expect(page.get_by_role("group", name="Mask tools")).to_be_visible()
    brush, eraser = (page.get_by_role("radio", name=name) for name in ("Brush", "Eraser"))
    expect(brush).to_be_checked()
    page.get_by_label("Image", exact=True).focus()
    reached = []
    for _ in range(6):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.id"))
    assert reached == ["tool-brush", "brush-size", "mask-clear", "strength", "mask_blur",
                       "edit-remove"]  # fmt: skip
    size = page.get_by_label("Brush size")
    size.fill("8")
    paint(page, (8, 32), (56, 32))

    brush.focus()
    page.keyboard.press("ArrowRight")  # the tool, by the keyboard
    expect(eraser).to_be_checked()
    size.focus()
    for _ in range(8):
        page.keyboard.press("ArrowRight")  # 8 -> 16 px
    expect(page.locator("#brush-size-value")).to_have_text("16 px")
    paint(page, (32, 16), (32, 48))  # erases x 24.5..40.5 across the stroke
    record = generate(page, ui_app, "a stroke with a gap", mask_blur="0")
    sent = pixels(fetched(ui_app, record["parameters"]["edit"]["mask"]["url"]), "L")
    assert (sent[32, 9:23] == 255).all() and (sent[32, 42:56] == 255).all()
    assert (sent[32, 26:39] == 0).all()  # erased

    # Clear mask, by the keyboard: nothing painted, no mask sent (the whole image reworked).
    paint(page, (8, 8), (56, 56))
    page.get_by_role("button", name="Clear mask").focus()
    page.keyboard.press("Enter")
    record = generate(page, ui_app, "cleared: img2img", mask_blur="")
    assert record["parameters"]["edit"]["mask"] is None


def test_a_finger_paints_the_mask(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    mask = choose(page, source_png())
    page.get_by_label("Brush size").fill("8")
    mask.scroll_into_view_if_needed()
    mask.evaluate("c => c.addEventListener('pointerdown', e => { c.dataset.by = e.pointerType })")
    box = mask.bounding_box()
    assert box
    scale = box["width"] / SIDE
    x = box["x"] + 32.5 * scale
    touch = page.context.new_cdp_session(page)
    touch.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
    scrolled = page.evaluate("window.scrollY")
    for kind, y in [("touchStart", 16), *[("touchMove", y) for y in range(18, 46, 2)]]:
        point = {"x": x, "y": box["y"] + (y + 0.5) * scale}
        touch.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": [point]})
    touch.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    expect(mask).to_have_attribute("data-by", "touch")
    column = mask.evaluate(
        "c => Array.from(c.getContext('2d').getImageData(32, 0, 1, c.height).data)"
        ".filter((_, i) => i % 4 === 3)"
    )
    assert all(alpha == 255 for alpha in column[16:45]) and column[:10] == [0] * 10  # painted
    assert page.evaluate("window.scrollY") == scrolled  # a stroke down it, not a scroll


def test_edit_on_a_gallery_image_makes_it_the_source(new_page, ui_app):
    answer = requests.post(
        ui_app.url("/generate"),
        data={"prompt": "a gallery image to edit", "steps": "1", "size": "64x64"},
        timeout=WAIT_MS,
    )
    assert answer.status_code == 200, answer.text
    image_id, stored = answer.headers["X-Image-Id"], answer.content
    page = open_ui(new_page, ui_app)
    card = page.locator(f"#gallery li[data-image-id='{image_id}']")
    card.get_by_role("button", name="Edit: a gallery image to edit").click()
    mask = shown_mask(page)
    expect(page.get_by_label("Image", exact=True)).to_be_focused()
    assert mask.evaluate("c => [c.width, c.height]") == [64, 64]
    expect(page.locator("#edit-status")).to_contain_text(f"Editing {image_id}.png (64x64)")
    record = generate(page, ui_app, "edited from the gallery", strength="0.5")
    edit = record["parameters"]["edit"]
    assert edit["source"]["sha256"] == hashlib.sha256(stored).hexdigest()  # that very PNG
    assert edit["mask"] is None and edit["strength"] == 0.5


def drop_or_paste(page: Page, png: bytes, name: str, event: str) -> None:
    """A file dropped on the edit's fieldset, or pasted on the prompt, as a browser sends it."""
    page.evaluate(
        """([bytes, name, event]) => {
            const data = new DataTransfer();
            data.items.add(new File([new Uint8Array(bytes)], name, { type: "image/png" }));
            const init = { bubbles: true, cancelable: true };
            if (event === "drop") {
              document.getElementById("edit").dispatchEvent(
                new DragEvent("drop", { ...init, dataTransfer: data }));
            } else {
              document.getElementById("prompt").dispatchEvent(
                new ClipboardEvent("paste", { ...init, clipboardData: data }));
            }
        }""",
        [list(png), name, event],
    )


def test_a_dropped_or_pasted_image_and_without_one_text_to_image(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    drop_or_paste(page, source_png(48, 40), "dropped.png", "drop")
    mask = shown_mask(page)
    expect(page.locator("#edit-status")).to_contain_text("Editing dropped.png (48x40)")
    assert mask.evaluate("c => [c.width, c.height]") == [48, 40]
    drop_or_paste(page, source_png(56, 64), "pasted.png", "paste")
    expect(page.locator("#edit-status")).to_contain_text("Editing pasted.png (56x64)")
    assert mask.evaluate("c => [c.width, c.height]") == [56, 64]

    page.get_by_label("Strength").fill("0.5")
    page.reload()
    expect(page.locator("#mask")).to_be_hidden()  # the image is not kept across a reload
    assert page.input_value("#strength") == "0.5"  # the edit's fields are, with the form's
    drop_or_paste(page, source_png(48, 40), "dropped.png", "drop")
    shown_mask(page)
    page.get_by_role("button", name="Remove image").click()
    expect(mask).to_be_hidden()
    expect(page.get_by_label("Image", exact=True)).to_be_focused()
    record = generate(page, ui_app, "no image: text to image", size="64x64")
    assert "edit" not in record["parameters"]  # strength not sent without an image
    card = page.locator("#gallery li").first
    expect(card.locator("img")).to_have_count(1)  # no source beside it


def test_a_refused_image_or_field_is_said_beside_it(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    image = page.get_by_label("Image", exact=True)
    image.set_input_files(files=[{"name": "x.png", "mimeType": "image/png", "buffer": b"no"}])
    expect(page.locator("#error-image")).to_have_text(  # the page's own check: nothing to paint
        "Image could not be read: it is not an image, or it is truncated"
    )
    expect(image).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#mask")).to_be_hidden()

    choose(page, source_png())
    fill(page, prompt="refused strength", strength="0")
    page.get_by_role("button", name="Generate").click()
    expect(page.locator("#error-strength")).to_contain_text("greater than 0")
    expect(page.get_by_label("Strength")).to_be_focused()

    out = io.BytesIO()  # past the API's pixel bound (4 x GEN_MAX_SIDE squared), from its header
    Image.new("L", (4200, 4200)).save(out, format="PNG")
    choose(page, out.getvalue(), "huge.png")
    expect(page.locator("#edit-status")).to_contain_text("Editing huge.png (4200x4200)")
    fill(page, strength="")
    page.get_by_role("button", name="Generate").click()
    expect(page.locator("#error-image")).to_contain_text("declares 4200x4200 pixels")
    expect(image).to_be_focused()


def test_with_the_token_an_edits_source_shows_and_edit_loads_it(new_page, token_ui_app):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    png = source_png()
    answer = requests.post(
        token_ui_app.url("/generate"),
        data={"prompt": "edited with the token", "steps": "2", "strength": "0.5"},
        files={"image": ("house.png", png, "image/png")},
        headers=bearer,
        timeout=WAIT_MS,
    )
    assert answer.status_code == 200, answer.text
    page = new_page()
    page.context.add_init_script(f"sessionStorage.setItem('imagegen.token', '{TOKEN}')")
    page.goto(token_ui_app.url("/ui/"))
    card = page.locator(f"#gallery li[data-image-id='{answer.headers['X-Image-Id']}']")
    source = card.get_by_role("img", name="Source: edited with the token", exact=True)
    expect(source).to_have_attribute("src", re.compile("^blob:"))  # fetched with the token
    assert source.evaluate("i => i.decode().then(() => i.naturalWidth)") == SIDE
    card.get_by_role("button", name="Edit: edited with the token").click()
    expect(page.locator("#edit-status")).to_contain_text("(64x64)")
    shown_mask(page)
