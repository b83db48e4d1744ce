// The page of `attnmt serve`: type a sentence, see every model translate it side by side and
// where each one looked. All text goes into the page as text (never as HTML); every request goes
// to this server's JSON API (attnmt/serve/server.py).
"use strict";

(function () {
  const state = { models: [], examples: [], answer: null, sentence: "", beam: 1, nBest: 1, restoredChoices: new Map(),
                  panels: new Map(), gold: new Set(), goldWords: [[], []] };
  const byId = (id) => document.getElementById(id);

  // -- small helpers ------------------------------------------------------------------------------

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  function svg(tag, attributes) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    return node;
  }

  async function api(path, payload, signal) {
    const response = await fetch(path, {
      method: payload === undefined ? "GET" : "POST", signal,
      headers: payload === undefined ? {} : { "Content-Type": "application/json" },
      body: payload === undefined ? undefined : JSON.stringify(payload),
    });
    const kind = response.headers.get("Content-Type") || "";
    const body = kind.startsWith("application/json") ? await response.json() : await response.text();
    if (!response.ok) throw new Error(body && body.error ? body.error : `the server answered ${response.status}`);
    return body;
  }

  function say(text, isError) {
    const status = byId("status");
    status.textContent = text;
    status.classList.toggle("error", Boolean(isError));
  }

  function download(name, blob) {
    const url = URL.createObjectURL(blob);
    const link = el("a", { href: url, download: name });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  const mean = (matrices) => matrices[0].map((row, i) => row.map((_, j) =>
    matrices.reduce((sum, matrix) => sum + matrix[i][j], 0) / matrices.length));

  // -- the matrices a panel can show --------------------------------------------------------------

  function matrixChoices(view) {
    const choices = [["the search's attention", view.search]];
    const layers = view.layers || [];
    layers.forEach((heads, l) => {
      const prefix = layers.length > 1 ? `layer ${l + 1}` : "";
      if (heads.length > 1) choices.push([`${prefix || "all heads"}${prefix ? ": " : ""}mean over heads`, mean(heads)]);
      heads.forEach((matrix, h) => {
        // the third item names the head for the pin, the step view and the replaced attention of a Transformer
        if (layers.length * heads.length > 1) choices.push([`${prefix}${prefix ? " / " : ""}head ${h + 1}`, matrix, `cross:${l + 1}:${h + 1}`]);
      });
    });
    return choices;
  }

  // -- the heatmap (SVG: it exports as it is) -----------------------------------------------------

  function heatmap(matrix, rows, columns, options) {
    const cell = 22, left = 8 + 7 * Math.max(4, ...rows.map((w) => w.length)), top = 8 + 7 * Math.max(4, ...columns.map((w) => w.length));
    const width = left + cell * columns.length + 10, height = top + cell * rows.length + 4;
    const root = svg("svg", { class: "heatmap", width, height, viewBox: `0 0 ${width} ${height}`,
                              xmlns: "http://www.w3.org/2000/svg", role: "img", "aria-label": options.label });
    root.append(svg("rect", { x: 0, y: 0, width, height, fill: "#fff" }));
    const signed = Boolean(options.signed);
    const peak = signed ? Math.max(1e-9, ...matrix.flat().map(Math.abs)) : 1;
    columns.forEach((word, j) => {
      const label = svg("text", { x: left + cell * j + cell / 2, y: top - 6,
                                  transform: `rotate(-60 ${left + cell * j + cell / 2} ${top - 6})` });
      label.textContent = word;
      root.append(label);
    });
    rows.forEach((word, i) => {
      const label = svg("text", { x: left - 6, y: top + cell * i + cell / 2 + 4, "text-anchor": "end" });
      label.textContent = word;
      root.append(label);
      const best = signed ? -1 : matrix[i].indexOf(Math.max(...matrix[i]));
      matrix[i].forEach((value, j) => {
        const strength = Math.min(1, Math.abs(value) / peak);
        const colour = signed && value < 0 ? `rgba(196, 40, 40, ${strength})` : `rgba(25, 82, 163, ${strength})`;
        const rect = svg("rect", { class: "cell", x: left + cell * j, y: top + cell * i, width: cell, height: cell,
                                   fill: colour, "data-row": i, "data-col": j });
        const tip = svg("title", {});
        tip.textContent = `${word} → ${columns[j]}: ${value.toFixed(3)}`;
        rect.append(tip);
        root.append(rect);
        if (j === best && options.links && rows[i] !== "</s>") {
          root.append(svg("circle", { class: "link", cx: left + cell * j + cell / 2, cy: top + cell * i + cell / 2, r: 3 }));
        }
      });
      if (i < (options.forced || 0)) {
        root.append(svg("rect", { x: 2, y: top + cell * i + 2, width: 4, height: cell - 4, fill: "#e8590c" }));
      }
      if (options.changed && options.changed.has(i)) {  // this row's attention differs from the model's own
        root.append(svg("circle", { cx: left + cell * columns.length + 4, cy: top + cell * i + cell / 2, r: 3, fill: "#b42318" }));
      }
    });
    if (options.onCell) {
      root.addEventListener("click", (event) => {
        const target = event.target.closest ? event.target.closest("rect.cell") : null;
        if (target) options.onCell(Number(target.dataset.row), Number(target.dataset.col));
      });
    }
    return root;
  }

  // -- one panel per model --------------------------------------------------------------------------

  function wordsLine(kind, words, className, extra) {
    const line = el("div", { class: "words" }, el("span", { class: "kind", text: kind }));
    words.forEach((word, index) => line.append(el("span", Object.assign({ class: `word ${className}`, text: word,
                                                                               "data-index": index }, extra(index))), " "));
    return line;
  }

  function renderPanel(view, model) {
    const panel = el("section", { class: "panel", "data-model": view.model, "aria-label": `model ${view.model}` });
    const record = { view, model, panel, choice: state.restoredChoices.get(view.model) || 0, saliency: null,
                     controller: null };
    state.panels.set(view.model, record);
    panel.append(el("h2", {}, el("span", { text: view.model }),
                    el("span", { class: "muted", text: `${model.kind}, ${model.attention}` }),
                    el("span", { class: "muted score", text: `log P ${view.score.toFixed(2)}, ${(view.seconds * 1000).toFixed(0)} ms` })));
    record.body = el("div", {});
    panel.append(record.body);
    drawBody(record);
    return panel;
  }

  // The model's heads, part by part: a click switches one off (or on again) and translates anew.
  function headsView(record) {
    const parts = record.model.head_parts || {};
    const total = Object.values(parts).reduce((sum, [layers, heads]) => sum + layers * heads, 0);
    if (total < 2) return null;
    record.maskedHeads = record.maskedHeads || new Set();
    const box = el("details", { class: "heads", open: record.maskedHeads.size > 0 },
                   el("summary", { text: `heads (${total}): click one to switch it off and translate again` }));
    for (const [part, [layers, heads]] of Object.entries(parts)) {
      const grid = el("table", { class: "head-grid", "aria-label": `${part} heads` },
                      el("caption", { text: part.replace("_", " ") }));
      for (let layer = 1; layer <= layers; layer += 1) {
        const row = el("tr", {}, el("th", { text: `layer ${layer}` }));
        for (let head = 1; head <= heads; head += 1) {
          const label = `${part}:${layer}:${head}`;
          const off = record.maskedHeads.has(label);
          row.append(el("td", {}, el("button", {
            type: "button", class: `head${off ? " off" : ""}`, text: String(head), "data-head": label,
            "aria-pressed": String(off), title: `${label}: ${off ? "switched off; click to switch it on" : "click to switch it off"}`,
            onclick: () => toggleHead(record, label) })));
        }
        grid.append(row);
      }
      box.append(grid);
    }
    if (record.maskedHeads.size) {
      box.append(el("div", { class: "masked", text: `switched off: ${[...record.maskedHeads].join(", ")}` }),
                 el("div", { class: "muted", text: `with every head: ${record.ownOutput}` }));
    }
    return box;
  }

  async function toggleHead(record, label) {
    if (record.ownOutput === undefined) record.ownOutput = record.view.output;
    if (record.maskedHeads.has(label)) record.maskedHeads.delete(label); else record.maskedHeads.add(label);
    say(`translating with ${record.maskedHeads.size} head(s) switched off…`);
    try {
      const answer = await api("/api/translate", { sentence: state.sentence, beam: state.beam, n_best: state.nBest,
                                                   models: [record.view.model], mask_heads: [...record.maskedHeads].join(",") });
      record.view = answer.models[0];
      drawBody(record);
      say(`${record.view.model}: ${record.maskedHeads.size} head(s) switched off`);
    } catch (error) {
      say(error.message, true);
    }
  }

  function drawBody(record) {
    const { view, model } = record;
    const body = record.body;
    body.replaceChildren();
    const output = wordsLine("output", view.out_words, "out-word", (i) => ({
      tabindex: 0, "data-row": i,
      class: `word out-word${i < (view.forced_words || 0) ? " forced" : ""}${view.pinned && view.pinned.step === i ? " pinned" : ""}`,
    }));
    const source = wordsLine("source", view.src_words, "src-word", () => ({}));
    body.append(output, source);
    if (model.prefix) {  // an attnmt run: a click on an output word traces it
      output.title = "click an output word: which encoder and decoder states decide it (causal tracing)";
      output.addEventListener("click", (event) => {
        const target = event.target.closest(".out-word");
        if (target) traceWord(record, Number(target.dataset.row));
      });
    }
    output.addEventListener("mouseover", (event) => pick(event, record));
    output.addEventListener("focusin", (event) => pick(event, record));
    output.addEventListener("keydown", (event) => move(event));

    const choices = matrixChoices(view);
    const select = el("select", { "aria-label": "attention matrix", class: "matrix-select" });
    choices.forEach(([name], index) => select.append(el("option", { value: index, text: name })));
    select.value = String(Math.min(record.choice, choices.length - 1));
    select.addEventListener("change", () => { record.choice = Number(select.value); drawFigures(record); remember(); });
    const method = el("select", { "aria-label": "saliency method" });
    (model.saliency_methods || state.saliencyMethods).forEach((name) => method.append(el("option", { value: name, text: name })));
    const progress = el("span", { class: "progress", "aria-live": "polite" });
    const cancel = el("button", { type: "button", text: "cancel", hidden: true });
    const run = el("button", { type: "button", text: "saliency" });
    run.addEventListener("click", () => saliency(record, method.value, progress, cancel, run));
    cancel.addEventListener("click", () => record.controller && record.controller.abort());
    const controls = el("div", { class: "controls" }, select, method, run, cancel, progress,
                        el("button", { type: "button", text: "SVG", onclick: () => exportFigure(record, "svg") }),
                        el("button", { type: "button", text: "PNG", onclick: () => exportFigure(record, "png") }));
    if (model.intervene) {
      record.pin = el("input", { type: "checkbox", "aria-label": "pin attention" });
      controls.append(el("label", {}, record.pin, " pin"),
                      el("button", { type: "button", text: "step through", onclick: () => stepThrough(record) }),
                      el("button", { type: "button", text: "permuted attention", class: "counterfactual",
                                     onclick: () => counterfactual(record, "permuted") }),
                      el("button", { type: "button", text: "uniform attention", class: "counterfactual",
                                     onclick: () => counterfactual(record, "uniform") }));
    }
    body.append(controls);
    const heads = headsView(record);
    if (heads) body.append(heads);
    record.figures = el("div", { class: "figures" });
    body.append(record.figures);
    drawFigures(record);
    if (view.hypotheses && view.hypotheses.length > 1) {
      body.append(el("div", { class: "figure-title",
        text: `best hypotheses of beam ${view.beam}, ranked by log P / ((5 + |y|) / 6)^${view.alpha}; click a word to decode on from it` }));
      const list = el("ol", { class: "hypotheses", "aria-label": "best hypotheses" });
      view.hypotheses.forEach((hypothesis) => {
        const item = el("li", {});
        hypothesis.words.filter((w) => w !== "</s>").forEach((word, index) => {
          item.append(el("span", { class: "word", text: word, title: "decode on from here", onclick: () =>
            decodeFrom(record, hypothesis.words.slice(0, index + 1).join(" ")) }), " ");
        });
        item.append(el("span", { class: "score", text: `log P ${hypothesis.score.toFixed(2)}, ranked by ${hypothesis.normalized.toFixed(2)}` }));
        const best = view.hypotheses[0].words;
        const at = hypothesis.words.findIndex((word, i) => word !== best[i]);
        if (hypothesis !== view.hypotheses[0] && at >= 0 && at < best.length) {
          item.append(" ", el("button", { type: "button", class: "why-not", text: `why “${best[at]}” and not “${hypothesis.words[at]}”?`,
            title: "explain the translation's word against this alternative's (a contrastive explanation)",
            onclick: () => saliency(record, method.value, progress, cancel, run, hypothesis.pieces) }));
        }
        list.append(item);
      });
      body.append(list);
    }
    if (model.prefix) {
      const prefix = el("input", { type: "text", placeholder: "begin the translation with…", "aria-label": "prefix" });
      body.append(el("form", { class: "controls", onsubmit: (event) => { event.preventDefault(); decodeFrom(record, prefix.value); } },
                     prefix, el("button", { type: "submit", text: "decode from prefix" })));
    }
    record.result = el("div", { class: "result", hidden: true });
    body.append(record.result);
  }

  function drawFigures(record) {
    const { view } = record;
    const [name, matrix] = matrixChoices(view)[record.choice] || matrixChoices(view)[0];
    record.matrix = matrix;
    const onCell = record.pin ? (row, col) => { if (record.pin.checked) pin(record, row, col); } : null;
    record.svg = heatmap(matrix, view.out_words, view.src_words,
                         { label: `${view.model}: ${name}`, links: true, forced: view.forced_words, onCell });
    record.figures.replaceChildren(el("div", {}, el("div", { class: "figure-title", text: name }), record.svg));
    if (record.saliency && record.saliency.contrast) {
      const s = record.saliency, c = s.contrast;
      const box = el("div", { class: "contrast" }, el("div", { class: "figure-title",
        text: `why “${c.word}” and not “${c.foil}”? ${s.method} of log p(${c.output_piece}) − log p(${c.foil}) = ${c.value.toFixed(3)} at output piece ${c.step}` }));
      if (!c.depends_on_output) box.append(el("div", { class: "muted", text: `${s.method} does not depend on the output: the same for any foil` }));
      box.append(faithfulnessLine(s, "on the contrast"),
                 heatmap([c.scores], [`${c.word} / ${c.foil}`], c.src_words, { label: `${view.model}: contrast`, signed: true }));
      record.figures.append(box);
    } else if (record.saliency) {
      const s = record.saliency;
      record.figures.append(el("div", {}, el("div", { class: "figure-title",
        text: `${s.method}; agreement with attention: ${s.agreement === null ? "n/a" : s.agreement} (rank corr.), top-1 agreement ${s.top1 === null ? "n/a" : s.top1}` }),
        faithfulnessLine(s),
        heatmap(s.saliency, view.out_words, view.src_words, { label: `${view.model}: saliency`, signed: true })));
    }
  }

  function faithfulnessLine(s, what) {  // this sentence's comprehensiveness and sufficiency (AOPC over 1-3 words)
    const line = el("div", { class: "muted faithfulness" });
    if (!s.faithfulness) { line.textContent = "faithfulness: no source word to remove"; return line; }
    const part = (name, f) => `${name} ${f.comprehensiveness.toFixed(2)} / ${f.sufficiency.toFixed(2)}`;
    const names = Object.keys(s.faithfulness).filter((name) => name !== "attention" && name !== "random");
    line.textContent = `faithfulness${what ? " " + what : ""}, comprehensiveness / sufficiency (higher / lower is more faithful): ` +
      [part("attention", s.faithfulness.attention), ...names.map((name) => part(name, s.faithfulness[name])),
       part("random", s.faithfulness.random)].join("; ");
    return line;
  }

  // -- linked panels ----------------------------------------------------------------------------------

  // The row of another panel that stands for output word `row` of `from`: an equal word nearest in
  // relative position; without one, the word whose attention over the source is nearest (L1 over
  // the source words, when both panels have the same ones); else the same relative position.
  function rowFor(record, from, row) {
    const words = record.view.out_words, theirs = from.view.out_words;
    const place = (i, count) => (count > 1 ? i / (count - 1) : 0);
    const target = place(row, theirs.length);
    const word = theirs[row].toLowerCase();
    let best = -1;
    words.forEach((w, i) => {
      if (w.toLowerCase() === word && (best < 0 || Math.abs(place(i, words.length) - target) < Math.abs(place(best, words.length) - target))) best = i;
    });
    if (best >= 0) return best;
    const mine = record.matrix, other = from.matrix;
    if (mine && other && other[row] && record.view.src_words.join(" ") === from.view.src_words.join(" ")) {
      let nearest = Infinity;
      mine.forEach((weights, i) => {
        const distance = weights.reduce((sum, value, j) => sum + Math.abs(value - (other[row][j] || 0)), 0);
        if (distance < nearest) { nearest = distance; best = i; }
      });
      if (best >= 0) return best;
    }
    return Math.min(words.length - 1, Math.round(target * (words.length - 1)));
  }

  function shade(record, row, own) {
    const { panel, matrix } = record;
    panel.querySelectorAll(".out-word").forEach((node) => {
      node.classList.toggle("current", own && Number(node.dataset.row) === row);
      node.classList.toggle("linked", !own && Number(node.dataset.row) === row);
    });
    panel.querySelectorAll(".src-word").forEach((node) => {
      const weight = matrix[row] ? matrix[row][Number(node.dataset.index)] : 0;
      node.style.background = `rgba(232, 89, 12, ${Math.min(1, weight).toFixed(3)})`;
    });
    panel.querySelectorAll("svg.heatmap rect.cell").forEach((cell) => cell.classList.toggle("row-on", Number(cell.dataset.row) === row));
  }

  function pick(event, record) {
    const target = event.target.closest(".out-word");
    if (!target) return;
    const row = Number(target.dataset.row);
    for (const other of state.panels.values()) {
      shade(other, other === record ? row : rowFor(other, record, row), other === record);
    }
  }

  function move(event) {
    const step = ["ArrowRight", "ArrowDown"].includes(event.key) ? 1 : ["ArrowLeft", "ArrowUp"].includes(event.key) ? -1 : 0;
    if (!step) return;
    const words = [...event.currentTarget.querySelectorAll(".out-word")];
    const next = words[words.indexOf(event.target) + step];
    if (next) { next.focus(); event.preventDefault(); }
  }

  // -- requests of one panel ----------------------------------------------------------------------------

  async function saliency(record, method, progress, cancel, run, alternative) {
    record.controller = new AbortController();
    progress.textContent = `computing ${method}…`;
    cancel.hidden = false;
    run.disabled = true;
    try {
      const request = { sentence: state.sentence, model: record.view.model, method, beam: state.beam, steps: 10, samples: 10 };
      if (alternative) request.alternative = alternative;
      record.saliency = await api("/api/saliency", request, record.controller.signal);
      progress.textContent = `${record.saliency.seconds.toFixed(2)} s`;
      drawFigures(record);
    } catch (error) {
      progress.textContent = error.name === "AbortError" ? "cancelled" : error.message;
    } finally {
      cancel.hidden = true;
      run.disabled = false;
    }
  }

  function showResult(record, title, view, note, changed) {
    const box = record.result;
    box.hidden = false;
    box.replaceChildren(el("div", { class: "figure-title", text: title }),
                        el("div", { class: "words" }, el("span", { class: "kind", text: "output" }), view.output));
    if (note) box.append(el("div", { class: "muted", text: note }));
    const [name, matrix] = matrixChoices(view)[0];
    box.append(heatmap(matrix, view.out_words, view.src_words, { label: `${view.model}: ${name}`, links: true,
                                                                 forced: view.forced_words, changed }));
  }

  async function decodeFrom(record, prefix) {
    try {
      const view = await api("/api/prefix", { sentence: state.sentence, model: record.view.model, prefix });
      const changed = changedRows(record.view, view);
      showResult(record, `decoded from the prefix "${prefix}"`, view,
                 `the first ${view.forced_words} word(s) forced (orange); a red dot marks each row where the attention ` +
                 `differs from the model's own translation: ${changed.size} of ${Math.min(record.view.search.length, view.search.length)}`,
                 changed);
    } catch (error) {
      showResult(record, error.message, { output: "", out_words: [], src_words: [], search: [], layers: [] });
    }
  }

  function changedRows(before, after) {  // rows (output positions) whose word or attention moved by > 0.02
    const changed = new Set();
    const rows = Math.min(before.search.length, after.search.length);
    for (let i = 0; i < rows; i += 1) {
      if (before.out_words[i] !== after.out_words[i] ||
          before.search[i].some((value, j) => Math.abs(value - (after.search[i][j] || 0)) > 0.02)) changed.add(i);
    }
    return changed;
  }

  // The head an intervention acts on: for a Transformer, the head whose matrix is shown (an error
  // naming what to choose otherwise); an RNN has one, and sends none.
  function interventionHead(record) {
    if (!record.model.intervene_per_head) return {};
    const choice = matrixChoices(record.view)[record.choice];
    if (!choice || !choice[2]) throw new Error("choose one head's matrix (layer … / head …) above: the pin, the step view and the replaced attention act on that head");
    return { head: choice[2] };
  }

  function headWords(record) {
    const chosen = interventionHead(record);
    return chosen.head ? ` in head ${chosen.head}` : "";
  }

  async function counterfactual(record, kind) {
    try {
      const view = await api("/api/counterfactual", { sentence: state.sentence, model: record.view.model, kind, ...interventionHead(record) });
      showResult(record, `every step's attention${headWords(record)} ${kind === "uniform" ? "made uniform" : "permuted over the source"}`, view,
                 `the model's own: ${view.original_output}${view.output === view.original_output ? " (the same: this attention did not matter here)" : ""}`);
    } catch (error) {
      showResult(record, error.message, { output: "", out_words: [], src_words: [], search: [], layers: [] });
    }
  }

  async function pin(record, row, col) {
    try {
      const view = await api("/api/pin", { sentence: state.sentence, model: record.view.model, step: row, source_word: col, ...interventionHead(record) });
      showResult(record, `attention${headWords(record)} of "${record.view.out_words[row]}" pinned on "${record.view.src_words[col]}"`, view,
                 `before: ${view.original_output}`);
    } catch (error) {
      showResult(record, error.message, { output: "", out_words: [], src_words: [], search: [], layers: [] });
    }
  }

  function bar(weight) {  // its width set through the CSSOM: the page's policy forbids style attributes
    const node = el("span", { class: "bar" });
    node.style.width = `${Math.round(120 * weight)}px`;
    return node;
  }

  // The mechanism's equations as MathML, which the browser renders itself (no script, no CDN); a
  // user's mechanism has none, and its docstring is shown as text.
  function equation(answer) {
    if (!answer.equation_mathml) return el("pre", { class: "equation", text: answer.equation });
    const parsed = new DOMParser().parseFromString(answer.equation_mathml, "application/xml").documentElement;
    const box = el("div", { class: "equation", "aria-label": `${answer.mechanism} equations` });
    box.append(document.importNode(parsed, true));
    return box;
  }

  async function stepThrough(record) {
    const focused = record.panel.querySelector(".out-word.current");
    const step = focused ? Number(focused.dataset.row) : 0;
    try {
      const answer = await api("/api/step", { sentence: state.sentence, model: record.view.model, step, ...interventionHead(record) });
      const table = el("table", { class: "step-table" },
        el("tr", {}, el("th", { text: "source piece" }), el("th", { text: "score e_s" }), el("th", { text: "α_s = softmax" }), el("th", {})));
      answer.src_pieces.forEach((piece, s) => {
        table.append(el("tr", {}, el("td", { text: piece }),
                        el("td", { text: answer.scores ? answer.scores[s].toFixed(3) : "—" }),
                        el("td", { text: answer.weights[s].toFixed(3) }),
                        el("td", {}, bar(answer.weights[s]))));
      });
      const box = record.result;
      box.hidden = false;
      box.replaceChildren(el("div", { class: "figure-title", text: `step ${step + 1}: output piece "${answer.output_piece}", ${answer.mechanism}` }),
                          equation(answer), table,
                          el("div", { class: "muted", text: `context c = Σ α_s v_s: ${answer.context_size} numbers, ‖c‖ = ${answer.context_norm}; first ${answer.context.length}: ${answer.context.join(", ")}` }));
    } catch (error) {
      record.result.hidden = false;
      record.result.replaceChildren(el("p", { class: "error", text: error.message }));
    }
  }

  // Causal tracing of one output word: the probability it regains as each hidden state is restored.
  async function traceWord(record, row) {
    const box = record.result;
    box.hidden = false;
    const word = record.view.out_words[row];
    box.replaceChildren(el("div", { class: "figure-title", text: `tracing "${word}"…` }));
    try {
      const answer = await api("/api/trace", { sentence: state.sentence, model: record.view.model, word: row + 1 });
      const decoderColumns = ["<s>", ...answer.out_pieces].slice(0, answer.decoder[0].length);
      const layers = (grid, embeddings) => grid.map((_, k) => (embeddings && k === 0 ? "embed" : `layer ${embeddings ? k : k + 1}`));
      box.replaceChildren(
        el("div", { class: "figure-title trace-title", text: `why "${word}": p = ${answer.clean.toFixed(3)} clean, ${answer.corrupt.toFixed(3)} with "${answer.corrupted.join(" ")}" noised; each state restored (restored minus noised):` }),
        heatmap(answer.encoder, layers(answer.encoder, answer.encoder.length > 1), answer.src_pieces,
                { label: `${record.view.model}: tracing, encoder`, signed: true }),
        heatmap(answer.decoder, layers(answer.decoder, false), decoderColumns,
                { label: `${record.view.model}: tracing, decoder`, signed: true }),
        el("div", { class: "muted", text: `${answer.samples} draws of noise, ${answer.seconds.toFixed(2)} s` }));
    } catch (error) {
      box.replaceChildren(el("p", { class: "error", text: error.message }));
    }
  }

  function exportFigure(record, kind) {
    const text = new XMLSerializer().serializeToString(record.svg);
    const name = `${record.view.model}-attention`;
    if (kind === "svg") { download(`${name}.svg`, new Blob([text], { type: "image/svg+xml" })); return; }
    const image = new Image();
    const url = URL.createObjectURL(new Blob([text], { type: "image/svg+xml" }));
    image.onload = () => {
      const canvas = el("canvas", { width: image.width * 2, height: image.height * 2 });
      const context = canvas.getContext("2d");
      context.scale(2, 2);
      context.drawImage(image, 0, 0);
      URL.revokeObjectURL(url);
      canvas.toBlob((blob) => download(`${name}.png`, blob), "image/png");
    };
    image.src = url;
  }

  // -- the whole page -------------------------------------------------------------------------------------

  async function translate() {
    const sentence = byId("sentence").value.trim();
    if (!sentence) { say("Type a sentence first.", true); return; }
    state.sentence = sentence;
    state.beam = Number(byId("beam").value);
    state.nBest = Math.min(state.beam, Number(byId("n-best").value));
    say(`translating with ${state.models.length} model(s)…`);
    byId("translate").disabled = true;
    const started = performance.now();
    const panels = byId("panels");
    panels.replaceChildren();
    state.panels.clear();
    // One request per model, side by side: each panel appears as soon as its model has answered.
    const slots = state.models.map((model) => {
      const slot = el("section", { class: "panel", "data-model": model.name },
                      el("h2", {}, el("span", { text: model.name }), el("span", { class: "muted", text: "translating…" })));
      panels.append(slot);
      return slot;
    });
    let errors = 0;
    await Promise.all(state.models.map(async (model, index) => {
      try {
        const answer = await api("/api/translate", { sentence, beam: state.beam, n_best: state.nBest, models: [model.name] });
        slots[index].replaceWith(renderPanel(answer.models[0], model));
      } catch (error) {
        errors += 1;
        slots[index].append(el("p", { class: "error", text: error.message }));
      }
    }));
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    say(errors ? `${errors} model(s) could not translate this sentence` : `${state.models.length} translation(s) in ${seconds} s`,
        errors > 0);
    document.documentElement.dataset.translated = String(Number(document.documentElement.dataset.translated || 0) + 1);
    byId("export-json").disabled = false;
    byId("copy-link").disabled = false;
    byId("translate").disabled = false;
    remember();
  }

  function remember() {  // the view in the address: sentence, beam, and each panel's matrix
    const matrices = [...state.panels.values()].map((record) => `${record.view.model}:${record.choice}`).join(",");
    location.hash = new URLSearchParams({ s: state.sentence, beam: state.beam, best: state.nBest, m: matrices }).toString();
  }

  function drawGoldGrid() {
    const source = byId("sentence").value.split(/\s+/).filter(Boolean), reference = byId("gold-reference").value.split(/\s+/).filter(Boolean);
    state.goldWords = [source, reference];
    const table = el("table", { "aria-label": "gold links" });
    const head = el("tr", {}, el("th", {}));
    reference.forEach((word) => head.append(el("th", { class: "col", text: word })));
    table.append(head);
    source.forEach((word, i) => {
      const row = el("tr", {}, el("th", { text: word }));
      reference.forEach((_, j) => row.append(el("td", { class: `link${state.gold.has(`${i}-${j}`) ? " on" : ""}`,
        "data-link": `${i}-${j}`, title: `${word} – ${reference[j]}`, onclick: (event) => {
          const key = `${i}-${j}`;
          if (state.gold.has(key)) state.gold.delete(key); else state.gold.add(key);
          event.target.classList.toggle("on");
          byId("gold-links").value = [...state.gold].join(" ");
        } })));
      table.append(row);
    });
    byId("gold-grid").replaceChildren(table);
  }

  async function scoreGold() {
    const table = byId("gold-table"), body = table.querySelector("tbody");
    try {
      const answer = await api("/api/gold", { sentence: state.sentence || byId("sentence").value,
                                              reference: byId("gold-reference").value, links: byId("gold-links").value,
                                              possible: state.possible || "" });
      body.replaceChildren();
      answer.models.forEach((row) => body.append(el("tr", {}, el("td", { text: row.model }),
        el("td", { text: row.precision.toFixed(3) }), el("td", { text: row.recall.toFixed(3) }),
        el("td", { text: row.aer.toFixed(3) }), el("td", { text: row.links.map((l) => l.join("-")).join(" ") }))));
      table.hidden = false;
      say("");
    } catch (error) {
      say(error.message, true);
    }
  }

  async function exportJson() {
    try {
      const text = await api("/api/export", { sentence: state.sentence, beam: state.beam });
      download("attnmt-attention.jsonl", new Blob([text], { type: "application/x-ndjson" }));
    } catch (error) {
      say(error.message, true);
    }
  }

  async function start() {
    const page = await api("/api/models");
    state.models = page.models;
    state.examples = page.examples;
    state.saliencyMethods = page.saliency_methods;
    byId("model-list").textContent = page.models.map((m) => `${m.name} (${m.kind})`).join(", ");
    for (let k = 1; k <= page.max_beam; k += 1) {
      byId("beam").append(el("option", { value: k, text: k }));
      byId("n-best").append(el("option", { value: k, text: k }));
    }
    byId("beam").value = "5";
    byId("n-best").value = "3";
    page.examples.forEach((example, index) => byId("examples").append(el("option", { value: index, text: example.source })));
    byId("examples").addEventListener("change", (event) => {
      const example = state.examples[Number(event.target.value)];
      if (!example) return;
      byId("sentence").value = example.source;
      byId("reference").hidden = false;
      byId("reference").textContent = `reference: ${example.reference}`;
      byId("gold-reference").value = example.reference;
      state.gold = new Set(example.links ? example.links.split(" ").filter(Boolean) : []);
      state.possible = example.possible || "";
      byId("gold-links").value = example.links || "";
      if (example.links !== undefined) byId("gold-box").open = true;
      drawGoldGrid();
      translate();
    });
    byId("ask").addEventListener("submit", (event) => { event.preventDefault(); translate(); });
    byId("gold-reference").addEventListener("input", drawGoldGrid);
    byId("gold-links").addEventListener("change", () => {
      state.possible = "";  // links typed by hand are all sure
      state.gold = new Set(byId("gold-links").value.split(/[\s,]+/).filter(Boolean));
      drawGoldGrid();
    });
    byId("gold-box").addEventListener("toggle", drawGoldGrid);
    byId("gold-score").addEventListener("click", scoreGold);
    byId("export-json").addEventListener("click", exportJson);
    byId("copy-link").addEventListener("click", () => {
      const link = location.href;
      if (navigator.clipboard) navigator.clipboard.writeText(link).then(() => say(`copied ${link}`), () => say(link));
      else say(link);
    });
    const restored = new URLSearchParams(location.hash.slice(1));
    document.documentElement.dataset.ready = "true";
    state.restoredChoices = new Map((restored.get("m") || "").split(",").filter(Boolean)
      .map((item) => [item.slice(0, item.lastIndexOf(":")), Number(item.slice(item.lastIndexOf(":") + 1)) || 0]));
    if (restored.get("s")) {
      byId("sentence").value = restored.get("s");
      if (restored.get("beam")) byId("beam").value = restored.get("beam");
      if (restored.get("best")) byId("n-best").value = restored.get("best");
      translate();
    }
  }

  start().catch((error) => say(`cannot reach the server: ${error.message}`, true));
})();
