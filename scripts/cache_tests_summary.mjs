// Reads the JSON results of the outside HTTP-caching suite (cache-tests.fyi, the npm package
// http-cache-tests) and judges them with the suite's own rules (lib/display.mjs).
// Usage: node cache_tests_summary.mjs SUITE_DIR ALLOWED_FILE RESULTS.json [OTHER.json ...]
// Prints a line per test that is not a pass, and the counts per result for each file. Exits 1
// when a required test of the first file fails (on its own result, not a dependency's) and
// ALLOWED_FILE does not name it with a reason.
import fs from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const [suiteDir, allowedFile, ...files] = process.argv.slice(2)
const load = p => import(pathToFileURL(path.join(suiteDir, p)).href)
const display = await load('lib/display.mjs')
const suites = (await load('tests/index.mjs')).default
const results = files.map(f => JSON.parse(fs.readFileSync(f, 'utf8')))
const allowed = new Map(fs.readFileSync(allowedFile, 'utf8').split('\n')
  .filter(l => l.trim() && !l.startsWith('#'))
  .map(l => { const [id, ...why] = l.split(/\s+/); return [id, why.join(' ')] }))

const names = { '✅': 'pass', '⛔️': 'fail', '⚠️': 'optional fail', Y: 'yes', N: 'no', '🔹': 'setup fail', '⁉️': 'harness fail', '⚪️': 'dependency fail', '-': 'untested', '↻': 'retry' }
const counts = files.map(() => ({}))
const unexpected = []
const seen = new Set()
for (const suite of suites) {
  for (const test of suite.tests) {
    const own = results.map(r => display.determineTestResult(suites, test.id, r, true)[2] || '-')
    const shown = results.map(r => display.determineTestResult(suites, test.id, r, true)[2] || '-')
    shown.forEach((s, i) => { counts[i][names[s]] = (counts[i][names[s]] || 0) + 1 })
    const required = test.kind === undefined || test.kind === 'required'
    if (required && (own[0] === '⛔️' || own[0] === '🔹' || own[0] === '⁉️')) {
      seen.add(test.id)
      if (!allowed.has(test.id)) unexpected.push(`${test.id}: ${JSON.stringify(results[0][test.id])}`)
    }
    if (!['✅', 'Y', 'N', '-'].includes(shown[0])) {
      console.log(`${shown.join(' ')}\t${test.kind || 'required'}\t${test.id}\t${JSON.stringify((results[0][test.id] || [])[1] || '')}`)
    }
  }
}
files.forEach((f, i) => console.log(`${path.basename(f)}: ${JSON.stringify(counts[i])}`))
for (const id of allowed.keys()) {
  if (!seen.has(id)) console.log(`note: ${id} is allowed to fail but did not`)
}
if (unexpected.length) {
  console.error('required tests that fail and are not in ' + allowedFile + ':\n  ' + unexpected.join('\n  '))
  process.exit(1)
}
