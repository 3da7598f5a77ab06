// The console's live controls, run by console.mjs with its page and
// helpers: acknowledging a failure group (hidden, shown again with its
// note, unacknowledged), and pausing a consumer (refused where the click
// was for a tenant's key; paused and resumed with a platform key, saying
// who and why).

export async function controlSteps({ page, step, check, byTestId, cssString, waitInPage, pictureOf, platformKey }) {
  await step('acknowledging a group hides it until shown again, with its note', async () => {
    // A group that stays: the edited replay's dead letter was replayed, so
    // make sure the grouped view lists what is left, replayed ones included.
    await page.getByLabel('Grouped', { exact: true }).check();
    await page.getByLabel('Include replayed', { exact: true }).check();
    const anyGroup = byTestId('dead-letter-group');
    await page.waitForSelector(anyGroup);
    const fingerprint = await page.$eval(anyGroup, (node) => node.dataset.fingerprint);
    const row = `${anyGroup}[data-fingerprint=${cssString(fingerprint)}]`;
    page.once('dialog', (dialog) => dialog.accept('INC-77: waiting for the provisioning fix'));
    await page.click(`${row} ${byTestId('group-acknowledge')}`);
    await waitInPage('the acknowledged group to leave the list', (selector) => !document.querySelector(selector), row);
    await page.getByLabel('Show acknowledged groups', { exact: true }).check();
    await page.waitForSelector(`${row} ${byTestId('group-acknowledgement')}`);
    const said = await page.textContent(`${row} ${byTestId('group-acknowledgement')}`);
    check(said.includes('INC-77: waiting for the provisioning fix'), `the note is shown: ${said}`);
    await pictureOf('main', 'dead-letters-acknowledged');
    await page.click(`${row} ${byTestId('group-unacknowledge')}`);
    await waitInPage('the group without its acknowledgement', (selector) => {
      const node = document.querySelector(selector);
      return node && !node.querySelector('[data-testid="group-acknowledgement"]');
    }, row);
    await page.getByLabel('Show acknowledged groups', { exact: true }).uncheck();
  });

  await step("pausing a consumer with a tenant's key is refused where the click was", async () => {
    await page.click(byTestId('tab-consumers'));
    const row = `${byTestId('consumer-row')}[data-consumer="commit"]`;
    await page.waitForSelector(`${row}[data-paused="false"]`);
    page.once('dialog', (dialog) => dialog.accept('a tenant cannot'));
    await page.click(`${row} ${byTestId('consumer-pause')}`);
    await page.waitForSelector(`${row} ${byTestId('consumer-error')} [data-code="platform-key-needed"]`);
  });

  await step('a platform key pauses a consumer, says who and why, and resumes it', async () => {
    await page.getByLabel('API key', { exact: true }).fill(platformKey);
    await page.click(byTestId('key-save'));
    await page.waitForSelector(`${byTestId('key-state')}[data-state="set"]`);
    await page.click(byTestId('tab-consumers'));
    const row = `${byTestId('consumer-row')}[data-consumer="commit"]`;
    await page.waitForSelector(`${row}[data-paused="false"]`);
    page.once('dialog', (dialog) => dialog.accept('INC-78: Azure DevOps is down'));
    await page.click(`${row} ${byTestId('consumer-pause')}`);
    await page.waitForSelector(`${row}[data-paused="true"] ${byTestId('consumer-state')}[data-status="paused"]`);
    const since = await page.textContent(`${row} td.detail`);
    check(since.includes('INC-78: Azure DevOps is down') && since.includes('key:'), `who and why: ${since}`);
    await pictureOf('main', 'consumers-paused');
    await page.click(`${row} ${byTestId('consumer-resume')}`);
    await page.waitForSelector(`${row}[data-paused="false"]`);
    // Back where the steps after these expect the page.
    await page.click(byTestId('tab-dead-letters'));
  });
}
