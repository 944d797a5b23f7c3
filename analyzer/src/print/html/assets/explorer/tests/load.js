// Loads the explorer's pure parts as the page does (explorer.rs puts them
// in one script, in order), in a context of their own, and returns their
// namespaces. The parts that touch the page (describe, draw, interact) are
// left to the browser tests (tests/tests/explorer.rs).
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const PARTS = ["units.js", "decode.js", "axis.js", "model.js", "layout.js"];

function load() {
  const source = PARTS.map((name) => fs.readFileSync(path.join(__dirname, "..", name), "utf8")).join("\n");
  // In one function, as on the page; in this realm, so that what they
  // return compares with the tests' own arrays and objects. What they use
  // of the browser (atob, Blob, DecompressionStream), Node 20 has too.
  return vm.runInThisContext(`(() => {\n"use strict";\n${source}\nreturn { units, decode, axis, model, layout };\n})()`, { filename: "explorer-parts.js" });
}

// The fixture analyzer/src/print/html/data.rs writes (its test
// the_pages_tests_read_what_this_writes).
function rustFixture() {
  return JSON.parse(fs.readFileSync(path.join(__dirname, "rust-fixture.json"), "utf8"));
}

module.exports = { load, rustFixture };
