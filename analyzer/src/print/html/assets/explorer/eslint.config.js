// ESLint's recommended rules for the explorer's script and its tests (see
// .ci/run, which installs eslint and @eslint/js outside the checkout and
// points NODE_PATH at them; this file is CommonJS so that require finds
// them there).
"use strict";
const js = require("@eslint/js");

// What the page's script uses of the browser.
const browser = { window: "readonly", document: "readonly", requestAnimationFrame: "readonly", atob: "readonly", Blob: "readonly", DecompressionStream: "readonly", Response: "readonly" };
// What the tests and this file use of Node.
const node = { require: "readonly", module: "writable", __dirname: "readonly", Buffer: "readonly", console: "readonly", atob: "readonly" };

module.exports = [
  js.configs.recommended,
  {
    // The parts are scripts, put together in one function by explorer.rs;
    // each names what it uses of the others in a /* global */ comment and
    // what it gives them in an /* exported */ one.
    files: ["*.js"],
    ignores: ["eslint.config.js"],
    languageOptions: { ecmaVersion: 2020, sourceType: "script", globals: browser },
  },
  {
    files: ["tests/*.js", "eslint.config.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "commonjs", globals: node },
  },
];
