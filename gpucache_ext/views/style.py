"""The views' stylesheet: JupyterLab's CSS variables (with fallbacks for
other frontends), so every view follows the light and dark themes."""

STYLE = """<style>
.gpucache-inspector, .gpucache-static {
  color: var(--jp-ui-font-color1, #1f1f1f);
  background: var(--jp-layout-color1, #ffffff);
  font-family: var(--jp-ui-font-family, system-ui, -apple-system, "Segoe UI", sans-serif);
  font-size: var(--jp-ui-font-size1, 13px);
  border: 1px solid var(--jp-border-color2, #e0e0e0);
  border-radius: 4px; padding: 8px; box-sizing: border-box; max-width: 100%;
}
.gpucache-inspector h3, .gpucache-static h3 {
  font-size: var(--jp-ui-font-size2, 15px); margin: 2px 0 6px; font-weight: 600;
  color: var(--jp-ui-font-color0, #000000);
}
.gpucache-inspector h4, .gpucache-static h4 {
  font-size: var(--jp-ui-font-size1, 13px); margin: 10px 0 4px; font-weight: 600;
  color: var(--jp-ui-font-color0, #000000);
}
.gpucache-inspector .widget-html-content { line-height: 1.45; }  /* ipywidgets sets 28px */
.gpucache-muted { color: var(--jp-ui-font-color2, #616161); }
.gpucache-table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 2px 0 6px; }
.gpucache-table caption, .gpucache-caption {
  text-align: left; caption-side: top; padding-bottom: 2px;
  color: var(--jp-ui-font-color2, #616161); font-size: 0.92em;
}
.gpucache-caption { margin: 6px 0 0; }
.gpucache-table th, .gpucache-table td {
  padding: 2px 8px; text-align: right; vertical-align: top;
  border-bottom: 1px solid var(--jp-border-color2, #e0e0e0);
}
.gpucache-table th:first-child, .gpucache-table td:first-child, .gpucache-table .gpucache-text {
  text-align: left;
}
.gpucache-table thead th {
  font-weight: 600; color: var(--jp-ui-font-color1, #1f1f1f);
  border-bottom: 1px solid var(--jp-border-color1, #bdbdbd);
}
.gpucache-table tbody th { font-weight: 600; }
.gpucache-left th, .gpucache-left td { text-align: left; }
.gpucache-wrap { word-break: break-all; }
.gpucache-tier th, .gpucache-tier td { color: var(--jp-ui-font-color2, #616161); font-weight: normal; }
.gpucache-tier th { padding-left: 20px; font-weight: normal !important; }
.gpucache-total th, .gpucache-total td { border-top: 1px solid var(--jp-border-color1, #bdbdbd); }
.gpucache-hit { color: var(--jp-success-color1, #2e7d32); }
.gpucache-miss { color: var(--jp-error-color1, #c62828); font-weight: 600; }
.gpucache-warn { color: var(--jp-warn-color1, #e65100); font-weight: 600; }
.gpucache-code, .gpucache-entries select, .gpucache-entries-head {
  font-family: var(--jp-code-font-family, SFMono-Regular, Menlo, Consolas, monospace);
  font-size: var(--jp-code-font-size, 12px);
}
.gpucache-entries-head {
  white-space: pre; padding: 0 5px; font-weight: 600;
  color: var(--jp-ui-font-color1, #1f1f1f);
}
/* The entries: the header and the listbox as wide as their longest line (a listbox
   cannot scroll sideways), in one box that scrolls sideways where they are wider. */
.gpucache-entries-scroll { overflow-x: auto !important; overflow-y: hidden !important; max-width: 100%; }
.gpucache-entries-scroll > .gpucache-entries-head-box, .gpucache-entries-scroll > .gpucache-entries {
  width: max-content !important; min-width: 100%; flex: 0 0 auto; margin-left: 0; margin-right: 0;
}
.gpucache-entries-scroll > .gpucache-entries select { width: max-content; min-width: 100%; flex: 1 0 auto; }
.gpucache-summary-table th, .gpucache-summary-table td { padding: 2px 4px; }  /* 12 columns fit 1200 px */
.gpucache-summary-table td, .gpucache-summary-table tbody th { white-space: nowrap; }
/* scrolled sideways in a narrow output, the stage names stay in view */
.gpucache-summary-table tbody th, .gpucache-summary-table thead th:first-child {
  position: sticky; left: 0; z-index: 1; background: var(--jp-layout-color1, #ffffff);
}
.gpucache-inspector pre, .gpucache-static pre {
  font-family: var(--jp-code-font-family, SFMono-Regular, Menlo, Consolas, monospace);
  font-size: var(--jp-code-font-size, 12px);
  background: var(--jp-layout-color2, #eeeeee); color: var(--jp-content-font-color1, #000000);
  border: 1px solid var(--jp-border-color2, #e0e0e0);
  max-height: 22em; overflow: auto; padding: 6px; margin: 4px 0; white-space: pre;
  max-width: 100%; box-sizing: border-box;
}
/* An HTML widget's content is a flex item, as wide as its longest line by default (min-width: auto):
   a listing's long lines (SASS, PTX, a link log) or a wide table would widen the view past the
   output, and its paragraphs with it (cut off, or in a box that scrolls).  At min-width 0 each view
   keeps the inspector's width, its prose wraps to it, and each listing or wide table scrolls in a
   box of its own (`gpucache-table-scroll`). */
.gpucache-entry-view > .widget-html-content, .gpucache-summary > .widget-html-content,
.gpucache-tiers > .widget-html-content, .gpucache-variants > .widget-html-content,
.gpucache-compare-view > .widget-html-content { min-width: 0; }
.gpucache-inspector details > summary { cursor: pointer; margin: 2px 0; }
.gpucache-chips { white-space: nowrap; }
.gpucache-chip {
  display: inline-block; padding: 0 4px; margin: 0 2px 0 0; border-radius: 3px;
  border: 1px solid var(--jp-border-color2, #e0e0e0); color: var(--jp-ui-font-color2, #616161);
}
.gpucache-chip-on {
  border-color: var(--jp-brand-color1, #1976d2); color: var(--jp-ui-font-color0, #000000);
  font-weight: 600;
}
.gpucache-chart { display: block; max-width: 100%; height: auto; }
.gpucache-chart .gpucache-bar-hit { fill: var(--jp-success-color1, #2e7d32); }
.gpucache-chart .gpucache-bar-miss { fill: var(--jp-error-color1, #c62828); }
.gpucache-chart text { fill: var(--jp-ui-font-color1, #1f1f1f); font-size: 10px; }
.gpucache-chart .gpucache-axis { stroke: var(--jp-border-color1, #9e9e9e); stroke-width: 1; }
.gpucache-entry-grid { display: flex; flex-wrap: wrap; gap: 0 28px; align-items: flex-start; }
.gpucache-entry-grid > section { flex: 1 1 420px; min-width: 0; max-width: 100%; }
.gpucache-entry-grid > section.gpucache-wide { flex-basis: 100%; }
.gpucache-status { min-height: 1.4em; }
.gpucache-status-error { color: var(--jp-error-color1, #c62828); font-weight: 600; }
.gpucache-status-ok { color: var(--jp-ui-font-color1, #1f1f1f); }
.gpucache-tiers-table .gpucache-muted { font-weight: normal; }
.gpucache-tiers-table .gpucache-where { white-space: nowrap; }
/* figures stay whole ("9.3 KiB", "100%"); a config breaks between its fields only, a title between
   its words; an occupancy is two short lines (its share, then what limits it), in every row alike,
   so that four of them fit beside the config in a narrow output */
.gpucache-resource-variants th, .gpucache-resource-variants td { white-space: nowrap; padding: 2px 6px; }
.gpucache-resource-variants td.gpucache-text, .gpucache-resource-variants thead th { white-space: normal; }
.gpucache-resource-variants .gpucache-limit { display: block; color: var(--jp-ui-font-color2, #616161); }
.gpucache-resource-variants thead th { vertical-align: bottom; }
.gpucache-resource-variants tbody th { text-align: left; }  /* the arch, under its title */
.gpucache-resource-variants th.gpucache-occupancy-head { text-align: center; border-bottom-width: 0; }
/* a table wider than the output scrolls sideways in a box of its own, its caption above it */
.gpucache-table-scroll { overflow-x: auto; max-width: 100%; }
/* Two entries' code side by side (the "compare with" view): two halves of one width; a long line
   wraps in its half */
.gpucache-side-by-side { table-layout: fixed; width: 100%; min-width: 720px; }
.gpucache-side-by-side td { white-space: pre-wrap; overflow-wrap: anywhere; padding: 0 6px; border-bottom: none; }
.gpucache-side-by-side col.gpucache-lineno { width: 3.5em; }
.gpucache-side-by-side col.gpucache-mark { width: 1.5em; }
.gpucache-side-by-side .gpucache-lineno { color: var(--jp-ui-font-color2, #616161); text-align: right; }
.gpucache-side-by-side .gpucache-mark { color: var(--jp-ui-font-color2, #616161); text-align: center; }
.gpucache-line-changed td { background: var(--jp-warn-color3, #fff3e0); }
.gpucache-line-left-only td { background: var(--jp-error-color3, #ffebee); }
.gpucache-line-right-only td { background: var(--jp-success-color3, #e8f5e9); }
.gpucache-line-gap td { color: var(--jp-ui-font-color2, #616161); text-align: center; }
</style>"""
