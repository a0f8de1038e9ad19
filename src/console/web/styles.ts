// The console's stylesheet, served as /static/console.<hash>.css (assets.ts). Colours are
// chosen for contrast (text 4.5:1 or more on its background, the focus ring 3:1 or more);
// the layout is one column on a phone and wider tables scroll inside their own box.

export const CONSOLE_CSS = `
*, *::before, *::after { box-sizing: border-box; }
html { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; font-size: 100%; line-height: 1.5; color: #1a1a1a; background: #ffffff; }
body { margin: 0; }
a { color: #0b57d0; }
a:visited { color: #5b2a86; }
:focus-visible { outline: 3px solid #1d4ed8; outline-offset: 2px; }
.skip-link { position: absolute; left: -10000px; top: 0; background: #ffffff; padding: 0.5rem 1rem; z-index: 10; }
.skip-link:focus { left: 0.5rem; top: 0.5rem; }
.visually-hidden { position: absolute; width: 1px; height: 1px; padding: 0; margin: -1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; border: 0; }
header.site { background: #1f2937; color: #ffffff; padding: 0.5rem 1rem; display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1.5rem; }
header.site a { color: #ffffff; }
header.site :focus-visible { outline-color: #ffffff; }
header.site .brand { font-weight: 700; text-decoration: none; }
header.site nav ul { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; }
header.site nav a[aria-current="page"] { font-weight: 700; text-decoration-thickness: 3px; }
header.site .who { margin-left: auto; display: flex; align-items: center; gap: 0.75rem; flex-wrap: wrap; }
header.site .who button { background: transparent; color: #ffffff; border: 1px solid #ffffff; }
main { padding: 1rem; max-width: 80rem; margin: 0 auto; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 1rem; overflow-wrap: anywhere; }
code { overflow-wrap: anywhere; }
td code { overflow-wrap: break-word; }
h2 { font-size: 1.2rem; margin: 1.5rem 0 0.5rem; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(11rem, 1fr)); gap: 0.75rem; margin: 0; }
.cards div { border: 1px solid #6b7280; border-radius: 0.375rem; padding: 0.5rem 0.75rem; }
.cards dt { font-size: 0.875rem; color: #374151; }
.cards dd { margin: 0; font-size: 1.375rem; font-weight: 600; }
.table-wrap { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; margin: 0.5rem 0; }
caption { text-align: left; font-weight: 600; padding: 0.25rem 0; }
th, td { text-align: left; vertical-align: top; padding: 0.375rem 0.5rem; border-bottom: 1px solid #9ca3af; }
th { background: #f3f4f6; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { max-width: 28rem; overflow-wrap: break-word; }
form.filter { display: grid; grid-template-columns: repeat(auto-fit, minmax(12rem, 1fr)); gap: 0.5rem 1rem; align-items: end; border: 1px solid #6b7280; border-radius: 0.375rem; padding: 0.75rem; margin: 0 0 1rem; }
label { display: block; font-weight: 600; font-size: 0.9375rem; }
.hint { display: block; font-weight: 400; font-size: 0.8125rem; color: #374151; }
input[type="text"], input[type="password"], input[type="number"], select { display: block; width: 100%; min-height: 2.75rem; padding: 0.375rem 0.5rem; font: inherit; color: #1a1a1a; background: #ffffff; border: 1px solid #4b5563; border-radius: 0.25rem; }
input[type="checkbox"] { width: 1.25rem; height: 1.25rem; }
button, .button { display: inline-flex; align-items: center; min-height: 2.75rem; padding: 0.375rem 1rem; font: inherit; font-weight: 600; color: #ffffff; background: #1d4ed8; border: 1px solid #1d4ed8; border-radius: 0.25rem; cursor: pointer; text-decoration: none; }
a.button, a.button:visited { color: #ffffff; }
button.secondary, .button.secondary, a.button.secondary:visited { color: #1d4ed8; background: #ffffff; }
button.danger { background: #b91c1c; border-color: #b91c1c; }
.actions { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: center; margin: 0.75rem 0; }
.notice { border-left: 0.375rem solid #1d4ed8; background: #eff6ff; padding: 0.5rem 0.75rem; margin: 0.75rem 0; }
.notice.error { border-color: #b91c1c; background: #fef2f2; }
.notice.warn { border-color: #a16207; background: #fefce8; }
.badge { display: inline-block; padding: 0 0.5rem; border-radius: 999px; font-size: 0.875rem; font-weight: 600; }
.badge.ok { color: #14532d; background: #dcfce7; }
.badge.bad { color: #7f1d1d; background: #fee2e2; }
.badge.warn { color: #713f12; background: #fef9c3; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f3f4f6; border: 1px solid #9ca3af; padding: 0.75rem; max-height: 40rem; overflow: auto; font-size: 0.875rem; }
dl.fields { display: grid; grid-template-columns: minmax(8rem, max-content) 1fr; gap: 0.25rem 1rem; }
dl.fields dt { font-weight: 600; }
dl.fields dd { margin: 0; overflow-wrap: anywhere; }
figure.chart { margin: 0.5rem 0; }
figure.chart svg { width: 100%; height: auto; max-height: 18rem; display: block; }
.chart .axis { stroke: #4b5563; stroke-width: 1; }
.chart .grid { stroke: #d1d5db; stroke-width: 1; }
.chart .label { fill: #374151; font-size: 15px; }
.chart .line { fill: none; stroke-width: 2.5; stroke-linejoin: round; }
.chart .ingress { stroke: #1d4ed8; }
.chart .egress { stroke: #15803d; stroke-dasharray: 8 4; }
.chart .dead { stroke: #b91c1c; stroke-dasharray: 2 3; }
.legend { display: flex; flex-wrap: wrap; gap: 1rem; list-style: none; padding: 0; margin: 0.25rem 0; }
.legend .key { display: inline-block; width: 1.5rem; height: 0; border-top-width: 3px; vertical-align: middle; margin-right: 0.375rem; }
.legend .ingress { border-top: 3px solid #1d4ed8; }
.legend .egress { border-top: 3px dashed #15803d; }
.legend .dead { border-top: 3px dotted #b91c1c; }
progress { width: 100%; height: 1.5rem; }
.login { max-width: 24rem; margin: 3rem auto; }
.login form > div { margin-bottom: 1rem; }
@media (max-width: 40rem) {
  header.site .who { margin-left: 0; }
  main { padding: 0.75rem; }
  dl.fields { grid-template-columns: 1fr; }
  dl.fields dd { margin-bottom: 0.5rem; }
}
`;
