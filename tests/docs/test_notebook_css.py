"""The notebook stylesheet cut down to what the pages use: rules and custom properties that cannot apply go, the rest
stays as it was."""
import importlib.resources

import tinycss2

from pu1_docs.notebook_css import purge, script_words, used_classes, used_properties


def _rules(css: str) -> list[str]:
    return [tinycss2.serialize(rule.prelude) for rule in tinycss2.parse_stylesheet(css)
            if rule.type == "qualified-rule"]


def test_the_classes_of_a_page_are_those_of_its_class_attributes():
    page = '<div class="jp-Cell  jp-CodeCell" id="x"><span class=\'cell-tag\'>x</span></div>'
    assert used_classes([page, '<svg class="main-svg"></svg>']) == {"jp-Cell", "jp-CodeCell", "cell-tag", "main-svg"}


def test_a_rule_stays_while_its_classes_are_used_and_keeps_only_the_selectors_that_can_match():
    css = ".a .b{color:red}.c{color:blue}.a,.c{margin:0}.a.c,.b>.a{padding:0}"
    assert _rules(purge(css, {"a", "b"})) == [".a .b", ".a", ".b>.a"]
    assert purge(css, {"a", "b"}) == ".a .b{color:red}.a{margin:0}.b>.a{padding:0}"


def test_rules_with_no_class_stay():
    css = "p{margin:0}:root{color:red}[data-x=\".a\"]{color:blue}table td+td{padding:0}.a{color:green}"
    assert purge(css, set()) == "p{margin:0}:root{color:red}[data-x=\".a\"]{color:blue}table td+td{padding:0}"


def test_a_class_under_not_does_not_count_and_one_under_is_counts_when_no_alternative_can_match():
    css = ".a:not(.unused){color:red}.a:not(.b .c){margin:0}.a :is(.b,.unused) p{padding:0}:is(.x,.y) p{border:0}"
    assert _rules(purge(css, {"a", "b"})) == [".a:not(.unused)", ".a:not(.b .c)", ".a :is(.b,.unused) p"]


def test_media_and_supports_blocks_are_purged_inside_and_dropped_when_emptied():
    css = ("@media (max-width:760px){.a{color:red}.b{color:blue}}@media print{.b{color:blue}}"
           "@supports (display:grid){@media screen{.b{display:grid}}}")
    assert purge(css, {"a"}) == "@media (max-width:760px){.a{color:red}}"


def test_other_at_rules_stay_as_they_are():
    css = '@charset "UTF-8";@font-face{font-family:x;src:url(x.woff)}@keyframes spin{to{transform:rotate(1turn)}}'
    assert purge(css, set()) == css


def test_unused_custom_properties_go_transitively_and_used_ones_stay():
    css = (".w{--used:1px;--via:var(--deep);--deep:2px;--unused:var(--only-for-unused);--only-for-unused:3px;"
           "--elsewhere:4px;margin:var(--used) var(--via, 0)}")
    assert purge(css, {"w"}) == ".w{--used:1px;--via:var(--deep);--deep:2px;margin:var(--used) var(--via, 0)}"
    assert purge(css, {"w"}, {"--elsewhere"}) == (".w{--used:1px;--via:var(--deep);--deep:2px;--elsewhere:4px;"
                                                   "margin:var(--used) var(--via, 0)}")
    # a rule left with only unused properties goes; one used by a dropped rule goes with it
    assert purge(".w{--x:1px}.gone{width:var(--x)}", {"w"}) == ""


def test_the_words_of_scripts_and_the_properties_styles_read():
    assert {"md-typeset__scrollwrap", "div"} <= script_words(['x("div",{class:"md-typeset__scrollwrap"})'])
    assert used_properties(['.h{color:var(--jp-mirror-editor-keyword-color)}', "a{b:var( --c, 1px)}"]) == {
        "--jp-mirror-editor-keyword-color", "--c"}


NOTEBOOK_PAGE = """
<div class="jupyter-wrapper"><div class="jp-Notebook" data-jp-theme-light="true">
<div class="jp-Cell jp-MarkdownCell jp-Notebook-cell"><div class="jp-Cell-inputWrapper">
<div class="jp-InputArea jp-Cell-inputArea"><div class="jp-InputPrompt jp-InputArea-prompt"></div>
<div class="jp-RenderedHTMLCommon jp-RenderedMarkdown jp-MarkdownOutput" data-mime-type="text/markdown">
<h2>A heading<a class="anchor-link" href="#a">&#182;</a></h2></div></div></div></div>
<div class="jp-Cell jp-CodeCell jp-Notebook-cell"><div class="jp-Cell-inputWrapper">
<div class="jp-InputArea jp-Cell-inputArea"><div class="jp-InputPrompt jp-InputArea-prompt">In&nbsp;[1]:</div>
<div class="jp-CodeMirrorEditor jp-Editor jp-InputArea-editor" data-type="inline"><div class="CodeMirror cm-s-jupyter">
<div class="highlight-ipynb hl-python"><pre><span class="kn">import</span> <span class="nn">torch</span></pre></div>
</div></div></div></div>
<div class="jp-Cell-outputWrapper"><div class="jp-OutputArea jp-Cell-outputArea"><div class="jp-OutputArea-child">
<div class="jp-OutputPrompt jp-OutputArea-prompt">Out[1]:</div>
<div class="jp-RenderedText jp-OutputArea-output jp-OutputArea-executeResult" data-mime-type="text/plain">
<pre>tensor([1.])</pre></div></div></div></div></div>
</div></div>
"""


def test_the_real_notebook_stylesheet_shrinks_to_a_valid_fraction_of_itself():
    assets = importlib.resources.files("mkdocs_jupyter") / "templates" / "mkdocs_html" / "assets"
    css = "\n".join((assets / name).read_text(encoding="utf-8") for name in ("index.css", "theme-light.css"))
    purged = purge(css, used_classes([NOTEBOOK_PAGE]))
    assert len(purged.encode()) < 120_000 < len(css.encode())
    rules = tinycss2.parse_stylesheet(purged)
    assert [rule for rule in rules if rule.type == "error"] == []
    for rule in rules:
        if rule.type == "qualified-rule":
            assert [item for item in tinycss2.parse_blocks_contents(rule.content) if item.type == "error"] == []
    assert ".jupyter-wrapper .jp-InputPrompt" in purged and "bp3-" not in purged and ".lm-" not in purged
    assert purged.startswith('@charset "UTF-8";')
