"""Shared by the tests/test_documents*.py files: fake translators with known alignments, and a small document of
every format with the markup each adapter must keep."""

from __future__ import annotations

import io

SAMPLES = {
    "text": "Hello there.  How are\n   you today? Fine.\n\n\n  Second paragraph\nover two lines.\n",
    "html": (
        "<!DOCTYPE html>\n<html><head><title>My page</title><style>p { color: red }</style></head>\n<body>\n"
        '<h1 class="x">Hello <b>big</b> world</h1>\n'
        '<p>The <i>red <b>cat</b></i> sat on the mat. It was <a href="/x" title="A link">very  happy</a> &amp; '
        'calm.<br>New line&nbsp;here <img src=a.png alt="A cat"> end.</p>\n'
        '<!-- a comment --><pre>keep  this</pre>\n<p translate="no">Do not <b>touch</b></p>\n'
        "<p>Run <code>make test</code> now, <span>un</span>true.</p>\n<script>if (a < b) { x(); }</script>\n"
        "</body></html>\n"
    ),
    "markdown": (
        "# Title *with emphasis* #\n\n> Quote **bold** and \\* escaped &amp; entity\n"
        '> lazy `code here` [a link](http://x.com "t") <span>h</span>\ncontinued  \nhard '
        "<http://auto.link> ![alt *a*](i.png) end.\n\n| a | b |\n|---|---|\n| c *d* | e |\n\n- item one\n"
        "  more [ref] and [x][ref].\n\n```\ncode block\n```\n\n    indented code\n\n[ref]: http://y\n"
    ),
    "srt": (
        "1\n00:00:01,000 --> 00:00:02,500\nHello <i>there, my</i>\ngood friend\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\nhow are you? {\\an8}Fine.\n\n"
        "3\n00:00:05,000 --> 00:00:06,000\n<b>Bye</b> now &amp; then\n"
    ),
    "vtt": (
        "WEBVTT\n\nNOTE a note\n\nintro\n00:01.000 --> 00:02.000 align:start\n"
        "<v Roger>Hello <c.yellow>big</c> world,\nand more\n\n00:03.000 --> 00:04.000\nthen &amp; <00:03.500>now.\n"
    ),
    "po": (
        '# Spanish messages.\nmsgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
        '"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n#: src/main.c:10\n#, c-format\nmsgctxt "menu"\n'
        'msgid "Could not open %s: the file is gone."\nmsgstr ""\n\n#: src/main.c:20\nmsgid "%d file copied"\n'
        'msgid_plural "%d files copied"\nmsgstr[0] ""\nmsgstr[1] ""\n\nmsgid ""\n"Usage: cp [OPTION]...\\n"\n'
        '"Copy files. See https://gnu.org for more.\\n"\nmsgstr ""\n\nmsgid "Done"\nmsgstr "Hecho"\n\n'
        '#~ msgid "Old"\n#~ msgstr "Viejo"\n'
    ),
    "xliff": (
        '<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">\n'
        '  <file source-language="en" target-language="es" datatype="plaintext" original="app">\n    <body>\n'
        '      <trans-unit id="1">\n        <source>Click <g id="1">Save now</g> to keep %s &amp; <x id="2"/>'
        "quit.</source>\n      </trans-unit>\n"
        '      <trans-unit id="2">\n        <source>Hello <bpt id="3">&lt;b&gt;</bpt>big world<ept id="3">&lt;/b&gt;'
        "</ept> today.</source>\n        <target/>\n      </trans-unit>\n"
        '      <trans-unit id="3">\n        <source>Done</source>\n        <target>Hecho</target>\n'
        "      </trans-unit>\n    </body>\n  </file>\n</xliff>\n"
    ),
}
EXTENSIONS = {"text": "txt", "html": "html", "markdown": "md", "srt": "srt", "vtt": "vtt", "docx": "docx"}
EXTENSIONS |= {"po": "po", "xliff": "xlf"}
TRANSLATION_FILES = ("po", "xliff")  # formats whose translation fills targets: their identity is not the source


def docx_sample(with_header: bool = True) -> bytes:
    """A Word file: a paragraph with a bold run, a table cell and (optionally) a header."""
    import docx

    document = docx.Document()
    paragraph = document.add_paragraph("The ")
    paragraph.add_run("big").bold = True
    paragraph.add_run(" dog ran home. It slept.")
    document.add_table(rows=1, cols=2).cell(0, 0).text = "Cell one"
    if with_header:
        document.sections[0].header.paragraphs[0].text = "Header text"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def sample(format: str) -> str | bytes:
    return docx_sample() if format == "docx" else SAMPLES[format]


class Identity:
    """Each sentence back as it is, with the identity alignment; records what it was asked."""

    def __init__(self, limit: int = 10**9) -> None:
        self.limit, self.sent = limit, []

    def translate(self, sentences):
        self.sent += sentences
        return [self.one(words) for words in (s.split() for s in sentences)]

    def one(self, words):
        return " ".join(words), [(i, i) for i in range(len(words))]

    def fits(self, sentence: str) -> bool:
        return len(sentence.split()) <= self.limit


class Reverse(Identity):
    """The words in reverse order, word i aligned to word n-1-i."""

    def one(self, words):
        return " ".join(reversed(words)), [(i, len(words) - 1 - i) for i in range(len(words))]


class Upper(Identity):
    """Every word upper-cased (so none is the source's own), the identity alignment."""

    def one(self, words):
        return " ".join(w.upper() for w in words), [(i, i) for i in range(len(words))]
