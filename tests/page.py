"""Reading an HTML report the way the tests need it: checked well-formed (every element closed, in
order) by the standard library's parser, with its tags, attributes and text collected."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.problems: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:] or 'nothing'} at {self.getpos()}")
        else:
            self.open.pop()

    def handle_data(self, data):
        if not self.open or self.open[-1] not in ("script", "style"):  # what a reader sees
            self.text.append(data)

    def all(self, tag: str) -> list[dict]:
        return [attrs for name, attrs in self.tags if name == tag]

    def files(self, tag: str, attr: str = "src") -> list[str]:
        """The relative files the page links from `tag` elements (URL-decoded)."""
        return [unquote(a[attr]) for a in self.all(tag) if attr in a and not a[attr].startswith("#")]

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def parse_page(path: Path) -> Page:
    page = Page()
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    page.feed(text)
    page.close()
    assert not page.problems and not page.open, (page.problems, page.open)
    return page


PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG
