// Opens the built docs site in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core) as a reader would, and checks what tests/ansible/docs-site.sh promises:
//  - every page reachable from the index loads with no failed request, no script error and no
//    docutils error box;
//  - the index links every module and every guide of docs/docsite/extra-docs.yml;
//  - each module page shows its title, an option table with a visible row for every option and
//    suboption that ansible-doc reports (the JSON in argv[3]), its examples as a highlighted
//    YAML block that calls the module, and its return values;
//  - the search box finds an option's module page;
//  - every link between pages resolves: the page answers 200 and the #anchor exists on it.
//    Links that leave the site (docs.ansible.com, Galaxy) are checked to be https URLs only: this
//    machine has no network.
// Usage: node check.mjs BASE_URL SCREENSHOT_DIR ANSIBLE_DOC_JSON GUIDE_NAMES
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

// playwright-core is installed outside the repo (.work/docs-node, see tests/ansible/docs-site.sh).
const { chromium } = createRequire(`${process.env.DOCS_NODE_DIR}/`)('playwright-core');

const [base, shots, docJson, guideList] = process.argv.slice(2);
const docs = JSON.parse(readFileSync(docJson, 'utf8'));
const guides = guideList.split(',').filter(Boolean);
const results = [];
const check = (name, ok, detail = '') => {
  results.push({ name, ok, detail });
  console.log(`${ok ? 'ok' : 'FAIL'}: ${name}${ok || !detail ? '' : `: ${detail}`}`);
};

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
const problems = [];
page.on('pageerror', (error) => problems.push(`script error: ${error.message}`));
page.on('console', (message) => {
  if (message.type() === 'error') problems.push(`console error: ${message.text()}`);
});
// A request the next navigation cancels (net::ERR_ABORTED) belongs to the page left behind; a
// missing file answers 404 and is caught below.
page.on('requestfailed', (request) => {
  const reason = request.failure()?.errorText ?? '';
  if (reason !== 'net::ERR_ABORTED') problems.push(`request failed: ${request.url()} (${reason})`);
});
page.on('response', (response) => {
  if (response.status() >= 400) problems.push(`${response.status()} for ${response.url()}`);
});

const pages = new Map(); // path -> { ids, links }
const external = new Set();
async function visit(path) {
  if (pages.has(path)) return pages.get(path);
  problems.length = 0;
  const response = await page.goto(base + path, { waitUntil: 'load' });
  const info = await page.evaluate(() => ({
    title: document.querySelector('h1')?.textContent.trim() ?? '',
    ids: [...document.querySelectorAll('[id]')].map((element) => element.id),
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
    docutilsErrors: [...document.querySelectorAll('.system-message, .problematic')].map((e) => e.textContent.trim().slice(0, 200)),
  }));
  info.status = response.status();
  info.problems = [...problems];
  pages.set(path, info);
  check(`${path} loads (HTTP ${info.status}) with no failed request or script error`,
    info.status === 200 && info.problems.length === 0, info.problems.join('; '));
  check(`${path} renders without docutils errors`, info.docutilsErrors.length === 0, info.docutilsErrors.join('; '));
  return info;
}

// Crawl everything reachable from the index.
const queue = ['index.html'];
const seen = new Set(queue);
while (queue.length) {
  const path = queue.shift();
  const info = await visit(path);
  for (const href of info.links) {
    const url = new URL(href);
    if (!url.href.startsWith(base)) {
      external.add(url.href);
      continue;
    }
    let target = url.pathname.slice(new URL(base).pathname.length) || 'index.html';
    if (target.endsWith('/')) target += 'index.html';
    if (target.endsWith('.html') && !seen.has(target)) {
      seen.add(target);
      queue.push(target);
    }
  }
}

// The index links every module and every guide.
const index = pages.get('index.html');
for (const module of Object.keys(docs)) {
  const short = module.split('.').pop();
  check(`the index links the ${module} page`, index.links.some((href) => href.endsWith(`/${short}_module.html`)));
}
for (const guide of guides) {
  check(`the index links the guide ${guide}`, index.links.some((href) => href.endsWith(`/docsite/${guide}.html`)));
  const info = pages.get(`docsite/${guide}.html`);
  check(`the guide ${guide} renders with a title`, Boolean(info && info.title), info ? '' : 'not reached');
}

// Module pages: title, option table, examples, return values.
function optionPaths(options, prefix = '') {
  return Object.entries(options ?? {}).flatMap(([name, option]) => [
    prefix + name,
    ...optionPaths(option.suboptions, `${prefix}${name}/`),
  ]);
}
for (const [module, entry] of Object.entries(docs)) {
  const short = module.split('.').pop();
  const path = `${short}_module.html`;
  await visit(path);
  await page.goto(base + path, { waitUntil: 'load' });
  const title = await page.locator('h1').first().textContent();
  check(`${path}: the title names ${module}`, title.includes(`${module} module`), title);
  const expected = optionPaths(entry.doc.options);
  const shown = await page.evaluate((paths) => paths.map((optionPath) => {
    const anchor = document.getElementById(`parameter-${optionPath}`);
    const row = anchor?.closest('tr');
    const box = row?.getBoundingClientRect();
    return {
      optionPath,
      inTable: Boolean(row?.closest('table.ansible-option-table')),
      visible: Boolean(box && box.height > 0 && box.width > 0),
    };
  }), expected);
  const missing = shown.filter((option) => !option.inTable || !option.visible).map((option) => option.optionPath);
  check(`${path}: the option table shows all ${expected.length} options and suboptions`, missing.length === 0,
    `missing or hidden: ${missing.join(', ')}`);
  const examples = page.locator('#examples div.highlight-yaml\\+jinja, #examples div[class*="highlight-yaml"]').first();
  const exampleText = (await examples.count()) ? await examples.innerText() : '';
  check(`${path}: the examples render as a highlighted YAML block calling ${module}`,
    (await examples.count()) > 0 && (await examples.isVisible()) && exampleText.includes(`${module}:`),
    exampleText.slice(0, 120));
  const highlighted = await page.locator('#examples div.highlight span').count();
  check(`${path}: the examples are syntax-highlighted`, highlighted > 10, `${highlighted} highlighted tokens`);
  const returns = Object.keys(entry.return ?? {});
  const returnsShown = await page.evaluate((names) => names.filter((name) => {
    const row = document.getElementById(`return-${name}`)?.closest('tr');
    return row && row.getBoundingClientRect().height > 0;
  }).length, returns);
  check(`${path}: the return values table shows all ${returns.length} return values`, returnsShown === returns.length,
    `${returnsShown} shown`);
  await page.screenshot({ path: `${shots}/${short}_module.png`, fullPage: false });
}

// The search box finds an option: Sphinx's search runs in the page's JavaScript.
await page.goto(base + 'index.html', { waitUntil: 'load' });
await page.fill('input[name="q"]', 'import_from');
await page.press('input[name="q"]', 'Enter');
const hit = page.locator('#search-results a[href*="vm_module.html"]').first();
const found = await hit.waitFor({ timeout: 15000 }).then(() => true, () => false);
check('searching the site for import_from finds the vm module page', found);

// Every link between pages resolves, anchors included.
const broken = [];
for (const [path, info] of pages) {
  for (const href of info.links) {
    if (!href.startsWith(base)) continue;
    const url = new URL(href);
    let target = url.pathname.slice(new URL(base).pathname.length) || 'index.html';
    if (target.endsWith('/')) target += 'index.html';
    if (!target.endsWith('.html')) {
      const response = await context.request.get(url.origin + url.pathname);
      if (!response.ok()) broken.push(`${path} -> ${href} (${response.status()})`);
      continue;
    }
    const targetInfo = await visit(target);
    const anchor = decodeURIComponent(url.hash.slice(1));
    if (targetInfo.status !== 200) broken.push(`${path} -> ${href} (HTTP ${targetInfo.status})`);
    else if (anchor && !targetInfo.ids.includes(anchor)) broken.push(`${path} -> ${href} (no #${anchor})`);
  }
}
const linkCount = [...pages.values()].reduce((sum, info) => sum + info.links.filter((href) => href.startsWith(base)).length, 0);
check(`all ${linkCount} links between the ${pages.size} pages resolve, anchors included`, broken.length === 0,
  broken.slice(0, 20).join('; '));
const badExternal = [...external].filter((href) => !/^https:\/\/[a-z0-9.-]+\.[a-z]{2,}(\/|$)/.test(href));
check(`the ${external.size} links that leave the site are https URLs`, badExternal.length === 0, badExternal.join(', '));

await browser.close();
const failed = results.filter((result) => !result.ok).length;
console.log(`browser: ${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
