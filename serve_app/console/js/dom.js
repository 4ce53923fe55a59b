// Building the page's elements: text always goes in as text (textContent), never as markup.

export const SVG_NS = "http://www.w3.org/2000/svg";

/** The element carrying the test and wiring hook `data-mai="<name>"`. */
export function hook(name, root = document) {
  return root.querySelector(`[data-mai="${name}"]`);
}

/** A new element: `attrs` are attributes (`class`, `data-*`, `title`, ...), `children` nodes or text. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** A new SVG element with its attributes. */
export function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

export function seconds(value) {
  if (value === null || value === undefined) return "–";
  return value < 10 ? `${value.toFixed(2)} s` : `${value.toFixed(1)} s`;
}

export function percent(value, digits = 0) {
  return value === null || value === undefined ? "–" : `${(100 * value).toFixed(digits)} %`;
}

export function count(value) {
  return value === null || value === undefined ? "–" : Number(value).toLocaleString("en");
}

/** A colour class for a model (`small`, `large`) or a route name. */
export function tone(name) {
  return `tone-${String(name).replace(/[^a-z0-9_-]/gi, "")}`;
}
