// Builds plotly.js with only the trace types in traces.js, minified, as one script that defines `Plotly`:
//   node build.js MODULES OUTPUT
// MODULES is the folder where `npm ci` installed this folder's package.json (it holds node_modules).
// plotly.js's own bundles are built with the same esbuild settings (its esbuild-config.js).
const fs = require('fs');
const path = require('path');

const [modulesFolder, output] = process.argv.slice(2);
if (!modulesFolder || !output) {
  console.error('usage: node build.js MODULES OUTPUT (MODULES holds the node_modules npm ci installed)');
  process.exit(2);
}
const modules = path.resolve(modulesFolder, 'node_modules');
const load = (name) => require(path.join(modules, name));
const esbuild = load('esbuild');
const { glsl } = load('esbuild-plugin-glsl');
const inlineCss = load('esbuild-plugin-inline-css');
const { environmentPlugin } = load('esbuild-plugin-environment');
const traces = require('./traces.js');

const entry = [
  "var Plotly = require('plotly.js/lib/core');",
  `Plotly.register([${traces.map((trace) => `require('plotly.js/lib/${trace}')`).join(', ')}]);`,
  'module.exports = Plotly;',
].join('\n');

esbuild.build({
  stdin: { contents: entry, resolveDir: modules, sourcefile: 'site-plotly.js' },
  nodePaths: [modules],
  outfile: path.resolve(output),
  format: 'iife',
  globalName: 'Plotly',
  bundle: true,
  minify: true,
  legalComments: 'inline',
  plugins: [inlineCss(), glsl({ minify: true }), environmentPlugin({ NODE_DEBUG: false })],
  alias: { regl: '@plotly/regl', stream: 'stream-browserify' },
  define: { global: 'window', 'define.amd': 'false' },
  target: 'es2016',
  logLevel: 'warning',
}).then(() => {
  const bytes = fs.statSync(output).size;
  console.log(`${output}: plotly.js with ${['scatter', ...traces].join(', ')} (${(bytes / 1e6).toFixed(2)} MB)`);
}).catch(() => process.exit(1));
