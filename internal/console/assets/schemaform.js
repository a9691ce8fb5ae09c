// A form generated from a JSON schema (the answer schema of a human
// wait): booleans become checkboxes, enums selects, strings text inputs,
// numbers and integers number inputs, anything else a JSON text area;
// required fields are marked and checked. Everything is built with DOM
// calls and textContent: a schema's titles and descriptions stay text.

import { el } from "./console.js";

let uid = 0;

// field builds one property's control; read() returns {value, error,
// skip}.
function field(name, prop, required) {
  const id = `sf-${++uid}`;
  const wrap = el("div", null, { class: "field" });
  const label = el("label", prop.title || name, { for: id });
  if (required) label.append(el("span", " (required)", { class: "req" }));
  const hint = prop.description ? el("p", prop.description, { class: "hint", id: `${id}-hint` }) : null;
  const err = el("p", null, { class: "field-error", id: `${id}-err`, "aria-live": "polite" });
  let input;
  let read;
  const type = Array.isArray(prop.type) ? prop.type.find((t) => t !== "null") : prop.type;
  if (Array.isArray(prop.enum)) {
    input = el("select", null, { id });
    if (!required) input.append(el("option", "(none)", { value: "" }));
    prop.enum.forEach((v, i) => input.append(el("option", JSON.stringify(v) === `"${v}"` ? v : JSON.stringify(v), { value: String(i) })));
    if (prop.default !== undefined) {
      const i = prop.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(prop.default));
      if (i >= 0) input.value = String(i);
    }
    read = () => (input.value === "" ? { skip: true } : { value: prop.enum[Number(input.value)] });
  } else if (type === "boolean") {
    input = el("input", null, { id, type: "checkbox" });
    input.checked = prop.default === true;
    read = () => ({ value: input.checked });
    wrap.classList.add("check");
  } else if (type === "number" || type === "integer") {
    input = el("input", null, { id, type: "number", step: type === "integer" ? "1" : "any", inputmode: "decimal" });
    if (prop.minimum !== undefined) input.setAttribute("min", prop.minimum);
    if (prop.maximum !== undefined) input.setAttribute("max", prop.maximum);
    if (prop.default !== undefined) input.value = String(prop.default);
    read = () => {
      const s = input.value.trim();
      if (s === "") return { skip: true };
      const n = Number(s);
      if (!Number.isFinite(n)) return { error: "must be a number" };
      if (type === "integer" && !Number.isInteger(n)) return { error: "must be a whole number" };
      if (prop.minimum !== undefined && n < prop.minimum) return { error: `must be at least ${prop.minimum}` };
      if (prop.maximum !== undefined && n > prop.maximum) return { error: `must be at most ${prop.maximum}` };
      return { value: n };
    };
  } else if (type === "string") {
    const long = (prop.maxLength || 0) > 200 || prop.format === "textarea";
    input = el(long ? "textarea" : "input", null, long ? { id, rows: "4" } : { id, type: "text", autocomplete: "off" });
    if (prop.default !== undefined) input.value = String(prop.default);
    read = () => {
      const s = input.value;
      if (s === "") return { skip: true };
      if (prop.minLength !== undefined && s.length < prop.minLength) return { error: `must be at least ${prop.minLength} characters` };
      if (prop.maxLength !== undefined && s.length > prop.maxLength) return { error: `must be at most ${prop.maxLength} characters` };
      if (prop.pattern) {
        try {
          if (!new RegExp(prop.pattern, "u").test(s)) return { error: `must match ${prop.pattern}` };
        } catch { /* a pattern the browser cannot compile: the server checks */ }
      }
      return { value: s };
    };
  } else {
    input = el("textarea", null, { id, rows: "3", spellcheck: "false" });
    if (prop.default !== undefined) input.value = JSON.stringify(prop.default, null, 2);
    read = () => {
      const s = input.value.trim();
      if (s === "") return { skip: true };
      try { return { value: JSON.parse(s) }; } catch { return { error: "must be valid JSON" }; }
    };
  }
  if (required && type !== "boolean") input.setAttribute("aria-required", "true");
  const described = [hint && hint.id, err.id].filter(Boolean).join(" ");
  input.setAttribute("aria-describedby", described);
  input.name = name;
  if (type === "boolean") wrap.append(input, label); else wrap.append(label, input);
  if (hint) wrap.append(hint);
  wrap.append(err);
  return {
    read() {
      const r = read();
      let msg = r.error || "";
      if (!msg && r.skip && required) msg = "is required";
      err.textContent = msg ? `${prop.title || name} ${msg}` : "";
      if (msg) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
      return { ...r, error: msg, input };
    },
    node: wrap,
  };
}

// schemaForm fills container with controls for schema (an object of
// JSON Schema; a non-object schema is one field "value") and returns
// read(): {ok, value} with the answer, or ok false with the first bad
// control focused.
export function schemaForm(container, schema) {
  container.replaceChildren();
  if (!schema || typeof schema !== "object") return { read: () => ({ ok: true, value: undefined }) };
  const whole = schema.type !== "object" && !schema.properties;
  const props = whole ? { value: schema } : schema.properties || {};
  const required = new Set(whole ? ["value"] : schema.required || []);
  const fields = Object.entries(props).map(([name, prop]) => [name, field(name, prop || {}, required.has(name))]);
  for (const [, f] of fields) container.append(f.node);
  return {
    read() {
      const out = {};
      let first = null;
      for (const [name, f] of fields) {
        const r = f.read();
        if (r.error) { first = first || r.input; continue; }
        if (!r.skip) out[name] = r.value;
      }
      if (first) { first.focus(); return { ok: false }; }
      return { ok: true, value: whole ? out.value : out };
    },
  };
}
