//! The report page treats names from the input as text: a function, file,
//! phase or trace name holding markup (`<script>`, `&`, quotes) comes out
//! escaped wherever the page shows it, and opens no element of its own.

use vramtrace_e2e::{repeated_phase_trace, scratch, vramtrace};

/// A function name that would run a script, were it written as markup.
const FUNCTION: &str = "<script>alert(\"pwned\")</script>";
/// A file name with an ampersand and a quote.
const FILE: &str = "/home/u/a&b's.py";
/// A phase name that would open an element.
const PHASE: &str = "step<img src=x onerror=alert(1)>&amp;";

/// A trace whose one site and repeated phase carry hostile names: three
/// repetitions of the phase, each allocating 1 MiB at that site.
fn trace() -> Vec<u8> {
    repeated_phase_trace(&[(FUNCTION, FILE, 7)], PHASE)
}

/// The page less its `<script>` elements: the explorer's data holds the
/// names as JSON (where `</` is written `<\/`, so none can close it).
fn outside_scripts(page: &str) -> String {
    let mut text = String::new();
    let mut rest = page;
    while let Some(start) = rest.find("<script") {
        text.push_str(&rest[..start]);
        let end = rest[start..]
            .find("</script>")
            .expect("every script element is closed");
        let script = &rest[start..start + end];
        assert!(
            script.starts_with("<script>") || script.starts_with("<script type="),
            "an element the page did not write: {script:.80}"
        );
        rest = &rest[start + end + "</script>".len()..];
    }
    text.push_str(rest);
    text
}

#[test]
fn names_holding_markup_come_out_escaped_in_the_page() {
    let dir = scratch("report-markup");
    let path = dir.join("run<b>&'1'.vtrace");
    std::fs::write(&path, trace()).unwrap();
    let html = dir.join("report.html");
    vramtrace([
        "report".as_ref(),
        path.as_os_str(),
        "-o".as_ref(),
        html.as_os_str(),
    ])
    .success();
    let page = std::fs::read_to_string(&html).unwrap();
    let text = outside_scripts(&page);
    for raw in [FUNCTION, FILE, PHASE, "<b>&", "<img", "alert(\"pwned\")"] {
        assert!(!text.contains(raw), "{raw:?} is in the page as markup");
    }
    // Each name is shown, as text.
    for shown in [
        "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;",
        "a&amp;b&#39;s.py",
        "step&lt;img src=x onerror=alert(1)&gt;&amp;amp;",
        "vramtrace report: run&lt;b&gt;&amp;&#39;1&#39;.vtrace",
    ] {
        assert!(text.contains(shown), "{shown:?} is not in the page");
    }
    // The explorer's data keeps the names, and no `</` that could close
    // its element.
    assert!(page.contains(r#"<script>alert(\"pwned\")<\/script>"#));
}
