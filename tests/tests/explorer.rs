//! The report's explorer, used in a real browser: headless Chromium driven
//! through its DevTools protocol (the `headless_chrome` crate, over the
//! system's Chromium). The page loads without a script error, a drag zooms,
//! hovering the largest allocation shows its stack, and a click on a moment
//! shows the allocator's segments then; a site has the colour the static
//! charts give it.

use headless_chrome::protocol::cdp::Input::{
    DispatchMouseEvent, DispatchMouseEventTypeOption, MouseButton,
};
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vramtrace_e2e::{chromium, fixture, scratch, write_report};

/// The page open in a browser, with the script errors it raised.
struct Page {
    // Kept alive: the tab closes with it.
    _browser: Browser,
    tab: Arc<Tab>,
    errors: Arc<Mutex<Vec<String>>>,
    /// Seconds from navigation to the explorer's first paint.
    first_paint_s: f64,
}

impl Page {
    fn open(browser_path: &str, page: &Path) -> Page {
        let options = LaunchOptions::default_builder()
            .path(Some(PathBuf::from(browser_path)))
            .sandbox(false)
            .window_size(Some((1400, 1000)))
            .idle_browser_timeout(Duration::from_secs(120))
            .build()
            .expect("launch options");
        let browser = Browser::new(options).expect("start chromium");
        let tab = browser.new_tab().expect("a tab");
        let errors = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&errors);
        tab.add_event_listener(Arc::new(move |event: &Event| {
            if let Event::RuntimeExceptionThrown(e) = event {
                let d = &e.params.exception_details;
                let text = d
                    .exception
                    .as_ref()
                    .and_then(|x| x.description.clone())
                    .unwrap_or_else(|| d.text.clone());
                seen.lock().unwrap().push(text);
            }
        }))
        .unwrap();
        tab.enable_runtime().unwrap();
        let started = Instant::now();
        tab.navigate_to(&format!("file://{}", page.display()))
            .unwrap()
            .wait_until_navigated()
            .unwrap();
        let mut page = Page {
            _browser: browser,
            tab,
            errors,
            first_paint_s: 0.0,
        };
        while page.eval("!!(window.vtExplorer && window.vtExplorer.ready)") != Value::Bool(true) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the explorer never got ready; errors: {:?}",
                page.errors()
            );
            assert!(page.errors().is_empty(), "{:?}", page.errors());
            std::thread::sleep(Duration::from_millis(20));
        }
        page.first_paint_s = started.elapsed().as_secs_f64();
        page
    }

    /// The value of a JavaScript expression (through JSON: the protocol
    /// hands objects back by reference).
    fn eval(&self, js: &str) -> Value {
        let r = self
            .tab
            .evaluate(&format!("JSON.stringify({js})"), false)
            .unwrap_or_else(|e| panic!("{js}: {e}"));
        match r.value {
            Some(Value::String(json)) => serde_json::from_str(&json).unwrap(),
            _ => Value::Null,
        }
    }

    fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    fn mouse(&self, kind: DispatchMouseEventTypeOption, x: f64, y: f64) {
        let pressed = !matches!(kind, DispatchMouseEventTypeOption::MouseMoved);
        self.tab
            .call_method(DispatchMouseEvent {
                Type: kind,
                x,
                y,
                modifiers: None,
                timestamp: None,
                button: Some(if pressed {
                    MouseButton::Left
                } else {
                    MouseButton::None
                }),
                buttons: None,
                click_count: pressed.then_some(1),
                force: None,
                tangential_pressure: None,
                tilt_x: None,
                tilt_y: None,
                twist: None,
                delta_x: None,
                delta_y: None,
                pointer_Type: None,
            })
            .unwrap();
    }

    fn click(&self, x: f64, y: f64) {
        self.mouse(DispatchMouseEventTypeOption::MouseMoved, x, y);
        self.mouse(DispatchMouseEventTypeOption::MousePressed, x, y);
        self.mouse(DispatchMouseEventTypeOption::MouseReleased, x, y);
    }

    /// The plot's corners in the window: (left, top, right, bottom).
    fn plot(&self) -> (f64, f64, f64, f64) {
        self.eval("document.getElementById('vt-chart').scrollIntoView({block: 'center'})");
        let v = self.eval(
            "(() => { const g = vtExplorer.geometry(), b = document.getElementById('vt-chart').getBoundingClientRect(); return [b.left + g.px0, b.top + g.py0, b.left + g.px1, b.top + g.py1]; })()",
        );
        let n = |i: usize| v[i].as_f64().unwrap();
        (n(0), n(1), n(2), n(3))
    }

    /// Waits for the page to draw what was asked (it draws on the next frame).
    fn settle(&self) {
        self.tab
            .evaluate(
                "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))",
                true,
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }

    /// Saves a screenshot of the window into `$VRAMTRACE_SCREENSHOTS/name`
    /// when that is set (docs/report.md shows them).
    fn keep_screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("VRAMTRACE_SCREENSHOTS") else {
            return;
        };
        let png = self
            .tab
            .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
            .unwrap();
        std::fs::write(Path::new(&dir).join(name), png).unwrap();
    }

    fn view(&self) -> (f64, f64) {
        let v = self.eval("[vtExplorer.view.x0, vtExplorer.view.x1]");
        (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
    }
}

#[test]
fn the_explorer_zooms_shows_stacks_and_the_allocator_state() {
    let Some(browser) = chromium() else { return };
    let dir = scratch("explorer");
    let page = Page::open(browser, &write_report(&fixture("leak.vtrace"), &dir));
    assert!(page.errors().is_empty(), "{:?}", page.errors());

    // Hovering the largest allocation shows its whole stack.
    let k = page.eval("vtExplorer.largest()").as_i64().unwrap();
    assert!(k >= 0, "no allocation kept");
    page.plot();
    page.settle();
    let at = page.eval(&format!("vtExplorer.pointOf({k})"));
    let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
    page.mouse(DispatchMouseEventTypeOption::MouseMoved, x, y);
    page.settle();
    let tip = page.eval("document.getElementById('vt-tip').innerText");
    let tip = tip.as_str().unwrap();
    let stack = page.eval(&format!("vtExplorer.stackOf({k})"));
    let frames: Vec<&str> = stack.as_str().unwrap().lines().collect();
    assert!(!frames.is_empty());
    for frame in &frames {
        assert!(tip.contains(frame), "{frame} is not in the tooltip:\n{tip}");
    }
    let size = page.eval(&format!("vtExplorer.allocations().size[{k}]"));
    let site = page.eval(&format!("vtExplorer.siteOf({k})"));
    assert!(tip.contains(site.as_str().unwrap()), "{tip}");
    assert!(
        tip.contains("allocated at") && tip.contains("freed at"),
        "{tip}"
    );
    // The largest allocation of the fixture: 32 MiB.
    assert_eq!(size.as_f64(), Some(32.0 * 1024.0 * 1024.0));
    assert!(tip.contains("32.0 MiB"), "{tip}");
    page.keep_screenshot("explorer-hover.png");

    // Dragging across the middle fifth of the plot zooms to it.
    let (left, top, right, bottom) = page.plot();
    let before = page.view();
    let (a, b) = (left + (right - left) * 0.4, left + (right - left) * 0.6);
    let mid = (top + bottom) / 2.0;
    page.mouse(DispatchMouseEventTypeOption::MouseMoved, a, mid);
    page.mouse(DispatchMouseEventTypeOption::MousePressed, a, mid);
    page.mouse(DispatchMouseEventTypeOption::MouseMoved, (a + b) / 2.0, mid);
    page.mouse(DispatchMouseEventTypeOption::MouseMoved, b, mid);
    page.mouse(DispatchMouseEventTypeOption::MouseReleased, b, mid);
    page.settle();
    let after = page.view();
    let ratio = (after.1 - after.0) / (before.1 - before.0);
    assert!((0.15..0.25).contains(&ratio), "{before:?} -> {after:?}");
    assert!(after.0 > before.0 && after.1 < before.1);
    let range = page.eval("document.getElementById('vt-range').textContent");
    assert!(range.as_str().unwrap().contains("events"), "{range}");

    // Clicking a moment near the end of the zoomed view shows the
    // allocator's segments at the checkpoint nearest it.
    let x = left + (right - left) * 0.9;
    let moment = page.eval(&format!(
        "vtExplorer.R(vtExplorer.view.x0 + ({x} - {left}) / ({right} - {left}) * (vtExplorer.view.x1 - vtExplorer.view.x0))"
    ));
    page.click(x, bottom - 2.0);
    page.settle();
    let info = page.eval("document.getElementById('vt-cp-info').textContent");
    let info = info.as_str().unwrap();
    assert!(info.starts_with("Showing the checkpoint nearest"), "{info}");
    assert!(
        info.contains("segments") && info.contains("largest free block"),
        "{info}"
    );
    let chosen = page.eval("(() => { const k = vtExplorer.checkpoint(); return document.getElementById('vt-checkpoint').options[k].textContent; })()");
    assert!(chosen.as_str().unwrap().contains("at event"), "{chosen}");
    let distance = page.eval(
        "[vtExplorer.checkpoint(), JSON.parse(document.getElementById('vt-data').textContent).checkpoints.map((c) => c.index - vtExplorer.first)]",
    );
    let indices: Vec<f64> = distance[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let k = distance[0].as_u64().unwrap() as usize;
    let m = moment.as_f64().unwrap();
    let best = indices
        .iter()
        .map(|i| (i - m).abs())
        .fold(f64::INFINITY, f64::min);
    assert_eq!((indices[k] - m).abs(), best, "not the nearest checkpoint");
    let height = page.eval("document.getElementById('vt-segments').clientHeight");
    assert!(
        height.as_f64().unwrap() > 100.0,
        "no segment view: {height}"
    );
    page.keep_screenshot("explorer-zoomed.png");
    page.eval("document.getElementById('vt-checkpoint').scrollIntoView()");
    page.settle();
    page.keep_screenshot("explorer-segments.png");

    // The other axes draw too.
    for axis in ["events", "busy", "time"] {
        page.eval(&format!("vtExplorer.setMode('{axis}')"));
        page.settle();
    }
    assert!(page.errors().is_empty(), "{:?}", page.errors());
    let png = page
        .tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .unwrap();
    std::fs::write(dir.join("explorer.png"), &png).unwrap();
    assert!(png.len() > 20_000, "the screenshot looks blank");
}

/// The explorer on a large report (`VRAMTRACE_BIG_REPORT=path`, made from
/// `analyzer/benches/make_big_snapshot.py`): its first paint, and that any
/// 1,000-event window shows allocations one by one. Run by hand: see
/// docs/performance-history.md, "The report's explorer".
#[test]
#[ignore = "needs a large report: VRAMTRACE_BIG_REPORT=path"]
fn a_large_report_paints_fast_and_shows_allocations_in_any_small_window() {
    let Some(browser) = chromium() else { return };
    let path = PathBuf::from(std::env::var("VRAMTRACE_BIG_REPORT").expect("VRAMTRACE_BIG_REPORT"));
    let page = Page::open(browser, &path);
    println!("first paint: {:.2} s", page.first_paint_s);
    let events = page.eval("JSON.parse(document.getElementById('vt-data').textContent).events");
    let events = events.as_f64().unwrap();
    let mut worst: f64 = 0.0;
    for i in 0..20 {
        let r0 = ((i as f64 + 0.5) / 20.0 * (events - 1000.0)).floor();
        let started = Instant::now();
        page.eval(&format!("vtExplorer.zoomToEvents({r0}, {r0} + 1000)"));
        page.settle();
        worst = worst.max(started.elapsed().as_secs_f64());
        let detail = page.eval(
            "(() => { const d = vtExplorer.detail(); return d && d.ok ? d.picked.length : -1; })()",
        );
        assert!(
            detail.as_i64().unwrap() > 0,
            "events {r0}..+1000: no allocation drawn one by one"
        );
    }
    println!("slowest zoom to a 1,000-event window: {worst:.2} s");
    assert!(page.errors().is_empty(), "{:?}", page.errors());
}

#[test]
fn colours_by_site_have_a_key_and_small_segments_are_summarized() {
    let Some(browser) = chromium() else { return };
    let dir = scratch("explorer-gpt2");
    let page = Page::open(
        browser,
        &write_report(&fixture("torch/gpt2_train.pickle.xz"), &dir),
    );
    // Colour by site: the key names each colour, the user's line first.
    page.eval("document.querySelector('[data-colour=site]').click()");
    page.settle();
    let shown = |id: &str| {
        page.eval(&format!("!document.getElementById('{id}').hidden && document.getElementById('{id}').offsetHeight > 0"))
    };
    assert_eq!(shown("vt-sites"), Value::Bool(true));
    assert_eq!(shown("vt-categories"), Value::Bool(false));
    let key = page.eval(
        "[...document.querySelectorAll('#vt-sites span[data-colour]')].map((s) => s.textContent)",
    );
    let key: Vec<&str> = key
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!((3..=12).contains(&key.len()), "{key:?}");
    assert_eq!(key.last(), Some(&"other sites"));
    // A site keeps its colour: the key's sites that the timeline chart's
    // legend names (on one line) have the chart's colour there.
    let alike = page.eval(
        "(() => { const data = JSON.parse(document.getElementById('vt-data').textContent); const legend = new Map(); for (const t of document.querySelectorAll('svg text')) { const r = t.previousElementSibling; if (r && r.tagName === 'rect' && r.getAttribute('fill')) legend.set(t.textContent.trim(), r.getAttribute('fill').toLowerCase()); } return data.site_key.filter((k) => legend.has(k.label)).map((k) => [k.label, k.colour, legend.get(k.label)]); })()",
    );
    let alike = alike.as_array().unwrap();
    assert!(
        !alike.is_empty(),
        "no site of the key in the chart's legend"
    );
    for site in alike {
        assert_eq!(site[1], site[2], "{site}");
    }
    assert!(
        key.iter()
            .any(|k| k.starts_with("steps (") && k.contains(" via ")),
        "{key:?}"
    );
    // Zoomed in to where allocations are drawn one by one, the key names
    // the sites drawn.
    page.eval("vtExplorer.zoomToEvents(9000, 10500)");
    page.settle();
    let named = page.eval("[...document.querySelectorAll('#vt-sites span[data-colour]')].filter((s) => !s.hidden).length");
    assert!(named.as_u64().unwrap() >= 1, "no site of those drawn named");
    page.plot();
    page.settle();
    page.keep_screenshot("explorer-sites.png");
    // The allocator's state: the largest segments, the rest in a line that
    // expands to all of them.
    page.eval("(() => { const s = document.getElementById('vt-checkpoint'); s.value = '0'; s.onchange(); })()");
    page.settle();
    let height = || {
        page.eval("document.getElementById('vt-segments').clientHeight")
            .as_f64()
            .unwrap()
    };
    let few = height();
    let note = page.eval("document.getElementById('vt-seg-more').textContent");
    assert!(
        note.as_str()
            .unwrap()
            .contains("smaller segments not drawn"),
        "{note}"
    );
    assert!(few <= 24.0 * 22.0 + 10.0, "{few}");
    page.eval("document.getElementById('vt-checkpoint').scrollIntoView()");
    page.settle();
    page.keep_screenshot("explorer-few-segments.png");
    page.eval("document.getElementById('vt-seg-toggle').click()");
    page.settle();
    assert!(height() > few, "the segments did not expand");
    assert!(page.errors().is_empty(), "{:?}", page.errors());
}

/// The key under the chart names only colours it draws: none while no
/// allocation is drawn one by one (a line says why), then the categories
/// of those drawn.
#[test]
fn the_key_names_only_the_colours_drawn() {
    let Some(browser) = chromium() else { return };
    let dir = scratch("explorer-key");
    let page = Page::open(browser, &write_report(&fixture("leak.vtrace"), &dir));
    let visible = |selector: &str| {
        page.eval(&format!(
            "[...document.querySelectorAll('{selector}')].filter((s) => !s.hidden && s.offsetHeight > 0).length"
        ))
        .as_u64()
        .unwrap()
    };
    page.settle();
    let drawn = visible("#vt-categories span[data-colour]");
    assert!(drawn >= 1, "no category of the allocations drawn is named");
    assert_eq!(visible("#vt-categories .vt-key-none"), 0);
    // Only colours drawn: leak.vtrace draws no buffer or gradient.
    let names = page.eval("[...document.querySelectorAll('#vt-categories span[data-colour]')].filter((s) => !s.hidden).map((s) => s.textContent)");
    assert!(
        !names.as_array().unwrap().iter().any(|n| n == "buffers"),
        "{names}"
    );
    page.eval("(() => { const d = document.getElementById('vt-detail'); d.checked = false; d.onchange(); })()");
    page.settle();
    assert_eq!(visible("#vt-categories span[data-colour]"), 0);
    assert_eq!(visible("#vt-categories .vt-key-none"), 1);
    assert!(page.errors().is_empty(), "{:?}", page.errors());
}

/// The page's layout: a nav link brings its section below the sticky bar,
/// not under it; no section's content overflows its card (the OOM table
/// overflowed by 19 px); the flame graph's frame is as tall as the graph.
#[test]
fn the_page_fits_its_cards_and_its_links_clear_the_sticky_bar() {
    let Some(browser) = chromium() else { return };
    let dir = scratch("report-layout");
    let page = Page::open(browser, &write_report(&fixture("oom.vtrace"), &dir));
    for id in ["ooms", "fixes", "leaks"] {
        page.eval(&format!(
            "document.querySelector('nav a[href=\"#{id}\"]').click()"
        ));
        page.settle();
        let gap = page.eval(&format!(
            "document.getElementById('{id}').getBoundingClientRect().top - document.querySelector('nav').getBoundingClientRect().bottom"
        ));
        assert!(
            gap.as_f64().unwrap() >= 0.0,
            "#{id} under the bar by {gap} px"
        );
    }
    let over = page.eval(
        "[...document.querySelectorAll('main section')].filter((s) => s.scrollWidth > s.clientWidth + 1).map((s) => [s.id, s.scrollWidth - s.clientWidth])",
    );
    assert_eq!(
        over,
        serde_json::json!([]),
        "sections overflowing their cards"
    );
    // An OOM under a recorded cap, whose limit's words are long.
    let capped = dir.join("capped.vtrace");
    vramtrace_e2e::write_capped_run(
        &capped,
        80_000 << 20,
        Some(12 << 30),
        500 << 20,
        1434,
        5530 << 20,
    );
    let capped = Page::open(
        browser,
        &write_report(&capped, &scratch("report-layout-capped")),
    );
    let over = capped.eval(
        "[...document.querySelectorAll('main section')].filter((s) => s.scrollWidth > s.clientWidth + 1).map((s) => [s.id, s.scrollWidth - s.clientWidth])",
    );
    assert_eq!(
        over,
        serde_json::json!([]),
        "sections of a capped OOM's page overflowing their cards"
    );
    let frame = page.eval(
        "(() => { const f = document.querySelector('iframe.flame'); const svg = atob(f.src.split(',')[1]); return [f.clientHeight, Number(/<svg[^>]* height=\"(\\d+)\"/.exec(svg)[1])]; })()",
    );
    let (frame, graph) = (frame[0].as_f64().unwrap(), frame[1].as_f64().unwrap());
    assert!(
        frame >= graph && frame <= graph + 40.0,
        "a {frame} px frame for a {graph} px graph"
    );
    assert!(page.errors().is_empty(), "{:?}", page.errors());
}
