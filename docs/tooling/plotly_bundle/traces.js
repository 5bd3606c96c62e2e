// The trace types the site's figures draw (scatter is part of plotly.js's core). A test compares this list with
// the trace types of every figure on the built site.
module.exports = ['bar', 'heatmap', 'treemap'];
