// Render the maths pymdownx.arithmatex marked (\( \) inline, \[ \] display) with the vendored
// KaTeX, on every page load (including Material's instant navigation).
function renderMaths(root) {
  renderMathInElement(root, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(({ body }) => renderMaths(body));
} else {
  document.addEventListener("DOMContentLoaded", () => renderMaths(document.body));
}
