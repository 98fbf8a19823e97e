"""The documentation-page measures of bench.conversion --docs count what a reader would see."""

from __future__ import annotations

from bench import _docpages

PAGE = (
    "<p>The <code>node:fs</code> module reads files, see <a href='x'><code>popen(3)</code></a>.</p>"
    "<pre><code>npm test</code></pre>"
)


def test_a_code_span_written_as_a_fenced_block_counts_and_a_real_one_line_block_does_not() -> None:
    broken = "The\n\n```\nnode:fs\n```\n\nmodule reads files, see [```\npopen(3)\n```](x).\n\n```\nnpm test\n```\n"
    kept = "The `node:fs` module reads files, see [`popen(3)`](x).\n\n```\nnpm test\n```\n"

    assert _docpages.inline_fences(broken, PAGE) == 2
    assert _docpages.inline_fences(kept, PAGE) == 0


def test_headings_ending_in_a_permalink_mark_are_counted_outside_code() -> None:
    markdown = "# Child process[#](#child-process)\n\n## Usage¶\n\n## Clean\n\n```\n# comment #\n```\n"

    assert _docpages.heading_marks(markdown) == 2


def test_rest_source_words_are_what_sphinx_shows() -> None:
    rest = (
        ".. index:: single: hidden; entry\n\n"
        ".. function:: glob(pathname)\n   :noindex:\n\n   Return paths, see :func:`~os.path.expanduser`.\n\n"
        ".. doctest::\n   :hide:\n\n   >>> secret_example()\n\n"
        ".. a comment nobody sees\n\n"
        "Read `the manual <https://example.org/manual>`_.\n"
    )

    assert _docpages.source_words(rest, "rest") == [
        "glob", "pathname", "return", "paths", "see", "expanduser", "read", "the", "manual",
    ]  # fmt: skip
