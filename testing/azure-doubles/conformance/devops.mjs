// The Azure DevOps double driven by Microsoft's official Node.js client,
// azure-devops-node-api (pinned in scripts/azure-devops-sdk): every
// operation bosun's Azure DevOps adapters use, through the client's own
// location discovery (GET _apis/ResourceAreas, OPTIONS _apis/{area}) and
// its own parsing of each answer into the fields bosun reads.
//
//   NODE_PATH="$(scripts/azure-devops-sdk node-path)" \
//   DEVOPS_ORG_URL=http://127.0.0.1:PORT/contoso DEVOPS_PAT=... DEVOPS_PROJECT=delivery \
//   node testing/azure-doubles/conformance/devops.mjs
//
// The double's test (tests/devops_conformance.rs) starts the double with
// the project and a pipeline script whose runs fail their "Unit tests"
// step and publish one test run ("unit": Pays passed, Refunds failed).
// Prints `ok <check>` per check; exits 1 with the reason on the first
// failure.

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

function fail(message) {
  console.error(`FAIL ${message}`);
  process.exit(1);
}

function need(name) {
  const value = process.env[name];
  if (!value) fail(`${name} is not set`);
  return value;
}

function check(condition, message, detail) {
  if (!condition) {
    fail(`${message}${detail === undefined ? '' : `: ${JSON.stringify(detail, null, 2)}`}`);
  }
}

function ok(name) {
  console.log(`ok ${name}`);
}

let azdev, GitInterfaces, PipelinesInterfaces, BuildInterfaces, PolicyInterfaces;
try {
  azdev = require('azure-devops-node-api');
  GitInterfaces = require('azure-devops-node-api/interfaces/GitInterfaces');
  PipelinesInterfaces = require('azure-devops-node-api/interfaces/PipelinesInterfaces');
  BuildInterfaces = require('azure-devops-node-api/interfaces/BuildInterfaces');
  PolicyInterfaces = require('azure-devops-node-api/interfaces/PolicyInterfaces');
} catch (err) {
  fail(`cannot load azure-devops-node-api (run with NODE_PATH="$(scripts/azure-devops-sdk node-path)"): ${err.message}`);
}

const orgUrl = need('DEVOPS_ORG_URL');
const pat = need('DEVOPS_PAT');
const project = need('DEVOPS_PROJECT');
const ZERO = '0000000000000000000000000000000000000000';
const MIN_REVIEWERS = 'fa6ba5fd-ee4a-4c6f-9f9e-5ee3e79ff4c3';

async function readStream(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

async function expectError(promise, status, text) {
  try {
    await promise;
  } catch (err) {
    check(err.statusCode === status, `expected HTTP ${status}`, { statusCode: err.statusCode, message: err.message });
    check(err.message.includes(text), `expected the error to say ${text}`, err.message);
    return err;
  }
  fail(`expected HTTP ${status} (${text}), the call succeeded`);
}

async function main() {
  const connection = new azdev.WebApi(orgUrl, azdev.getPersonalAccessTokenHandler(pat));

  const core = await connection.getCoreApi();
  const teamProject = await core.getProject(project);
  check(teamProject && teamProject.name === project && teamProject.id, 'getProject names the project', teamProject);
  ok('core: get project');

  const git = await connection.getGitApi();
  const created = await git.createRepository({ name: 'payments-api', project: { id: teamProject.id } }, project);
  check(created.id && created.name === 'payments-api' && created.project.name === project, 'createRepository', created);
  check(created.remoteUrl && created.webUrl, 'the repository has its URLs', created);
  ok('git: create repository');

  await expectError(git.createRepository({ name: 'payments-api', project: { id: teamProject.id } }, project), 409, 'TF400948');
  ok('git: a second repository of the same name is 409 TF400948');

  const byName = await git.getRepository('payments-api', project);
  const byId = await git.getRepository(created.id, project);
  check(byName && byId && byName.id === created.id && byId.name === 'payments-api', 'getRepository by name and id', { byName, byId });
  check((await git.getRepository('missing-repo', project)) === null, 'a missing repository reads as null (404)');
  ok('git: get repository by name and by id; missing is 404');

  const push = await git.createPush({
    refUpdates: [{ name: 'refs/heads/main', oldObjectId: ZERO }],
    commits: [{
      comment: 'Initial commit',
      author: { name: 'Bosun', email: 'bosun@contoso.example', date: new Date() },
      changes: [
        { changeType: GitInterfaces.VersionControlChangeType.Add, item: { path: '/README.md' }, newContent: { content: 'hello\n', contentType: GitInterfaces.ItemContentType.RawText } },
        { changeType: GitInterfaces.VersionControlChangeType.Add, item: { path: '/azure-pipelines.yml' }, newContent: { content: 'steps:\n- script: echo hi\n', contentType: GitInterfaces.ItemContentType.RawText } },
        { changeType: GitInterfaces.VersionControlChangeType.Add, item: { path: '/src/bin.dat' }, newContent: { content: Buffer.from([0, 1, 2, 255]).toString('base64'), contentType: GitInterfaces.ItemContentType.Base64Encoded } },
      ],
    }],
  }, created.id, project);
  const first = push.refUpdates[0].newObjectId;
  check(/^[0-9a-f]{40}$/.test(first) && push.commits[0].commitId === first, 'createPush answers the new commit', push);
  ok('git: push a commit to a new branch');

  const refs = await git.getRefs(created.id, project, 'heads/main');
  check(refs.length === 1 && refs[0].name === 'refs/heads/main' && refs[0].objectId === first, 'getRefs finds the branch', refs);
  ok('git: get refs by filter');

  const stale = await git.updateRefs([{ name: 'refs/heads/feature', oldObjectId: ZERO, newObjectId: first }], created.id, project);
  check(stale.length === 1 && stale[0].success === true, 'updateRefs creates a branch', stale);
  const again = await git.updateRefs([{ name: 'refs/heads/feature', oldObjectId: ZERO, newObjectId: first }], created.id, project);
  check(again[0].success === false && again[0].updateStatus === GitInterfaces.GitRefUpdateStatus.StaleOldObjectId, 'a stale oldObjectId fails', again);
  ok('git: update refs; a stale oldObjectId fails');

  const second = await git.createPush({
    refUpdates: [{ name: 'refs/heads/feature', oldObjectId: first }],
    commits: [{
      comment: 'Change the readme\n\nBody',
      changes: [
        { changeType: GitInterfaces.VersionControlChangeType.Edit, item: { path: '/README.md' }, newContent: { content: 'hello, world\n', contentType: GitInterfaces.ItemContentType.RawText } },
        { changeType: GitInterfaces.VersionControlChangeType.Delete, item: { path: '/src/bin.dat' } },
      ],
    }],
  }, created.id, project);
  const head = second.refUpdates[0].newObjectId;
  await expectError(git.createPush({
    refUpdates: [{ name: 'refs/heads/feature', oldObjectId: first }],
    commits: [{ comment: 'late', changes: [{ changeType: GitInterfaces.VersionControlChangeType.Add, item: { path: '/late.txt' }, newContent: { content: 'x', contentType: GitInterfaces.ItemContentType.RawText } }] }],
  }, created.id, project), 409, 'TF401028');
  ok('git: push on a moved branch is 409 TF401028');

  const branched = await git.createPush({
    refUpdates: [{ name: 'refs/heads/release', oldObjectId: first }],
    commits: [{ comment: 'Start a release branch', changes: [{ changeType: GitInterfaces.VersionControlChangeType.Add, item: { path: '/RELEASE.md' }, newContent: { content: 'v1\n', contentType: GitInterfaces.ItemContentType.RawText } }] }],
  }, created.id, project);
  const release = await git.getRefs(created.id, project, 'heads/release');
  check(release.length === 1 && release[0].objectId === branched.refUpdates[0].newObjectId, 'a push makes a new branch from the base commit', { branched, release });
  const releaseCommit = await git.getCommit(release[0].objectId, created.id, project);
  check(releaseCommit.parents[0] === first, 'the new branch starts at the base commit', releaseCommit);
  ok('git: a push with oldObjectId = the base commit creates a new branch');

  const atHead = await readStream(await git.getItemContent(created.id, '/README.md', project, undefined, undefined, undefined, undefined, undefined,
    { version: head, versionType: GitInterfaces.GitVersionType.Commit }));
  check(atHead === 'hello, world\n', 'getItemContent at the new commit', atHead);
  const atBranch = await readStream(await git.getItemContent(created.id, '/README.md', project, undefined, undefined, undefined, undefined, undefined,
    { version: 'main', versionType: GitInterfaces.GitVersionType.Branch }));
  check(atBranch === 'hello\n', 'getItemContent on main', atBranch);
  const item = await git.getItem(created.id, '/README.md', project, undefined, undefined, undefined, undefined, undefined,
    { version: head, versionType: GitInterfaces.GitVersionType.Commit }, true);
  check(item && item.path === '/README.md' && item.content === 'hello, world\n' && item.commitId === head, 'getItem with content', item);
  const gone = await git.getItem(created.id, '/src/bin.dat', project, undefined, undefined, undefined, undefined, undefined,
    { version: head, versionType: GitInterfaces.GitVersionType.Commit });
  check(gone === null, 'a deleted file is 404 at the new commit', gone);
  const items = await git.getItems(created.id, project, '/', GitInterfaces.VersionControlRecursionType.Full, undefined, undefined, undefined, undefined,
    { version: first, versionType: GitInterfaces.GitVersionType.Commit });
  const paths = items.filter((i) => !i.isFolder).map((i) => i.path).sort();
  check(JSON.stringify(paths) === JSON.stringify(['/README.md', '/azure-pipelines.yml', '/src/bin.dat']), 'getItems lists the tree', items);
  ok('git: items readable after a push, at a branch or a commit');

  const commit = await git.getCommit(head, created.id, project);
  check(commit.commitId === head && commit.parents[0] === first && commit.treeId && commit.comment.startsWith('Change the readme'), 'getCommit', commit);
  ok('git: get commit (tree, parent, comment)');

  const pr = await git.createPullRequest({ sourceRefName: 'refs/heads/feature', targetRefName: 'refs/heads/main', title: 'Change the readme', description: 'from bosun' }, created.id, project);
  check(pr.pullRequestId > 0 && pr.status === GitInterfaces.PullRequestStatus.Active, 'createPullRequest', pr);
  check(pr.createdBy && pr.createdBy.id && pr.lastMergeSourceCommit.commitId === head, 'the pull request names its creator and source commit', pr);
  check(pr.repository && pr.repository.project && pr.repository.project.id === teamProject.id && pr.repository.webUrl, 'the pull request names its repository and project', pr);
  ok('git: create pull request');

  await expectError(git.createPullRequest({ sourceRefName: 'refs/heads/feature', targetRefName: 'refs/heads/main', title: 'again' }, created.id, project), 409, 'TF401179');
  ok('git: a second active pull request for the same branches is 409 TF401179');

  const fetched = await git.getPullRequest(created.id, pr.pullRequestId, project);
  check(fetched.pullRequestId === pr.pullRequestId && fetched.title === 'Change the readme', 'getPullRequest', fetched);
  const active = await git.getPullRequests(created.id, { sourceRefName: 'refs/heads/feature', targetRefName: 'refs/heads/main', status: GitInterfaces.PullRequestStatus.Active }, project);
  check(active.length === 1 && active[0].pullRequestId === pr.pullRequestId, 'getPullRequests finds the active one', active);
  const completedBefore = await git.getPullRequests(created.id, { sourceRefName: 'refs/heads/feature', targetRefName: 'refs/heads/main', status: GitInterfaces.PullRequestStatus.Completed }, project);
  check(completedBefore.length === 0, 'no completed pull request yet', completedBefore);
  ok('git: get pull request; list by source, target and status');

  const status = await git.createPullRequestStatus({ state: GitInterfaces.GitStatusState.Succeeded, description: 'bosun checks passed', context: { name: 'bosun/delivery', genre: 'bosun' } }, created.id, pr.pullRequestId, project);
  check(status.id && status.state === GitInterfaces.GitStatusState.Succeeded, 'createPullRequestStatus', status);
  const statuses = await git.getPullRequestStatuses(created.id, pr.pullRequestId, project);
  check(statuses.length === 1 && statuses[0].context.name === 'bosun/delivery', 'getPullRequestStatuses', statuses);
  ok('git: create and list pull request statuses');

  const policy = await connection.getPolicyApi();
  const config = await policy.createPolicyConfiguration({
    isEnabled: true,
    isBlocking: true,
    type: { id: MIN_REVIEWERS },
    settings: { minimumApproverCount: 1, creatorVoteCounts: false, scope: [{ repositoryId: created.id, refName: 'refs/heads/main', matchKind: 'exact' }] },
  }, project);
  check(config.id > 0 && config.type.id === MIN_REVIEWERS && config.isBlocking === true, 'createPolicyConfiguration', config);
  const configs = await policy.getPolicyConfigurations(project, undefined, MIN_REVIEWERS);
  check(configs.length === 1 && configs[0].id === config.id && configs[0].settings.minimumApproverCount === 1, 'getPolicyConfigurations', configs);
  ok('policy: create and list configurations');

  const evaluations = await policy.getPolicyEvaluations(project, `vstfs:///CodeReview/CodeReviewId/${teamProject.id}/${pr.pullRequestId}`);
  check(evaluations.length === 1 && evaluations[0].configuration.id === config.id && evaluations[0].status === PolicyInterfaces.PolicyEvaluationStatus.Queued, 'getPolicyEvaluations', evaluations);
  check(evaluations[0].configuration.type.displayName === 'Minimum number of reviewers', 'the evaluation names its policy type', evaluations[0]);
  ok('policy: evaluations of the pull request');

  const updated = await git.updatePullRequest({ autoCompleteSetBy: { id: pr.createdBy.id }, completionOptions: { mergeStrategy: GitInterfaces.GitPullRequestMergeStrategy.NoFastForward, deleteSourceBranch: false } }, created.id, pr.pullRequestId, project);
  check(updated.autoCompleteSetBy && updated.autoCompleteSetBy.id === pr.createdBy.id && updated.status === GitInterfaces.PullRequestStatus.Active, 'updatePullRequest sets auto-complete', updated);
  ok('git: update pull request (auto-complete)');

  const pipelines = await connection.getPipelinesApi();
  const pipeline = await pipelines.createPipeline({
    name: 'payments-api',
    folder: '\\bosun\\contoso',
    configuration: { type: PipelinesInterfaces.ConfigurationType.Yaml, path: '/azure-pipelines.yml', repository: { id: created.id, name: 'payments-api', type: 'azureReposGit' } },
  }, project);
  check(pipeline.id > 0 && pipeline.folder === '\\bosun\\contoso' && pipeline.name === 'payments-api', 'createPipeline', pipeline);
  const listed = await pipelines.listPipelines(project);
  check(listed.some((p) => p.id === pipeline.id), 'listPipelines', listed);
  ok('pipelines: create from a YAML path; list');

  const build = await connection.getBuildApi();
  const definitions = await build.getDefinitions(project, 'payments-api');
  check(definitions.length === 1 && definitions[0].id === pipeline.id && definitions[0].path === '\\bosun\\contoso', 'getDefinitions by name', definitions);
  const definition = await build.getDefinition(project, pipeline.id);
  check(definition.repository && definition.repository.name === 'payments-api', 'getDefinition names the repository', definition);
  ok('build: definitions by name, with the repository');

  const run = await pipelines.runPipeline({ resources: { repositories: { self: { refName: 'refs/heads/main', version: first } } } }, project, pipeline.id);
  check(run.id > 0 && run.pipeline && run.pipeline.folder === '\\bosun\\contoso' && run._links.web.href, 'runPipeline', run);
  const got = await pipelines.getRun(project, pipeline.id, run.id);
  check(got.state === PipelinesInterfaces.RunState.Completed && got.result === PipelinesInterfaces.RunResult.Failed && got.finishedDate instanceof Date, 'getRun: the scripted run failed', got);
  ok('pipelines: run a pipeline; get the run');

  const builds = await build.getBuilds(project, [pipeline.id], undefined, undefined, undefined, undefined, undefined, undefined, undefined, undefined, undefined, undefined, 50, undefined, undefined, undefined, BuildInterfaces.BuildQueryOrder.QueueTimeDescending, 'refs/heads/main');
  check(builds.length === 1 && builds[0].id === run.id && builds[0].sourceVersion === first, 'getBuilds by definition and branch', builds);
  const details = await build.getBuild(project, run.id);
  check(details.status === BuildInterfaces.BuildStatus.Completed && details.result === BuildInterfaces.BuildResult.Failed && details.definition.path === '\\bosun\\contoso', 'getBuild', details);
  check(details.uri === `vstfs:///Build/Build/${run.id}`, 'the build URI', details.uri);
  ok('build: list builds; get build');

  const timeline = await build.getBuildTimeline(project, run.id);
  const failedTask = timeline.records.find((r) => r.type === 'Task' && r.result === BuildInterfaces.TaskResult.Failed);
  check(failedTask && failedTask.name === 'Unit tests' && timeline.records.every((r) => r.startTime instanceof Date), 'getBuildTimeline', timeline);
  ok('build: timeline with the failed task');

  const logs = await build.getBuildLogs(project, run.id);
  check(logs.length >= 1 && logs[0].id === 1, 'getBuildLogs', logs);
  const lines = await build.getBuildLogLines(project, run.id, logs[0].id);
  check(Array.isArray(lines) && lines.some((line) => line.includes('Unit tests')), 'getBuildLogLines', lines);
  ok('build: logs and log lines');

  const artifacts = await build.getArtifacts(project, run.id);
  check(artifacts.length === 1 && artifacts[0].name === 'drop' && artifacts[0].resource
    && artifacts[0].resource.type === 'PipelineArtifact' && artifacts[0].resource.downloadUrl, 'getArtifacts', artifacts);
  const drop = await build.getArtifact(project, run.id, 'drop');
  check(drop.name === 'drop' && drop.resource.downloadUrl === artifacts[0].resource.downloadUrl, 'getArtifact by name', drop);
  // The client reads a 404 on a GET as no result.
  const missing = await build.getArtifact(project, run.id, 'missing');
  check(missing === null, 'getArtifact of a missing artifact is a 404', missing);
  const zip = await readStream(await build.getArtifactContentZip(project, run.id, 'drop'));
  check(zip.startsWith('PK') && zip.includes('drop/out/payments'), 'getArtifactContentZip: a zip of the folder', zip.slice(0, 80));
  ok('build: pipeline artifacts, one by name (404 for a missing one) and its zip');

  const test = await connection.getTestApi();
  const testRuns = await test.getTestRuns(project, `vstfs:///Build/Build/${run.id}`, undefined, undefined, undefined, true);
  check(testRuns.length === 1 && testRuns[0].name === 'unit' && testRuns[0].totalTests === 2 && testRuns[0].passedTests === 1, 'getTestRuns by build', testRuns);
  check(testRuns[0].runStatistics && testRuns[0].runStatistics.some((s) => s.outcome === 'Failed' && s.count === 1), 'runStatistics by outcome', testRuns[0]);
  const results = await test.getTestResults(project, testRuns[0].id, undefined, 0, 100);
  check(results.length === 2 && results.some((r) => r.outcome === 'Failed' && r.errorMessage && r.automatedTestName.endsWith('Refunds')), 'getTestResults', results);
  const failing = await test.getTestResults(project, testRuns[0].id, undefined, 0, 100, [3 /* TestOutcome.Failed */]);
  check(failing.length === 1 && failing[0].outcome === 'Failed', 'getTestResults by outcome', failing);
  ok('test: test runs of the build and their results');

  const evaluationsAfter = await policy.getPolicyEvaluations(project, `vstfs:///CodeReview/CodeReviewId/${teamProject.id}/${pr.pullRequestId}`);
  check(evaluationsAfter.length === 1, 'evaluations still listed', evaluationsAfter);
  const complete = await git.updatePullRequest({ status: GitInterfaces.PullRequestStatus.Completed, lastMergeSourceCommit: { commitId: head } }, created.id, pr.pullRequestId, project);
  check(complete.status === GitInterfaces.PullRequestStatus.Completed && complete.lastMergeCommit && complete.lastMergeCommit.commitId, 'completing the pull request merges it', complete);
  const merged = await readStream(await git.getItemContent(created.id, '/README.md', project, undefined, undefined, undefined, undefined, undefined,
    { version: 'main', versionType: GitInterfaces.GitVersionType.Branch }));
  check(merged === 'hello, world\n', 'main has the merged change', merged);
  ok('git: complete a pull request; main has the change');
}

main().then(
  () => console.log('all checks passed'),
  (err) => fail(`${err && err.stack ? err.stack : err}`),
);
