package daemon

// runRules are the fields every run kind shares that are not in another
// area's table: what runs, its environment, its resources as the scheduler
// reads them, scheduling, and the run kinds' own fields that need no
// subsystem.
var runRules = fieldRules{
	"type":     {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"name":     {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"env":      {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"shell":    {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"commands": {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},

	"resources":        {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"resources.memory": {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},

	// Instance volumes (host paths the host's admin allows); daemon/volumes.go.
	"volumes": {Proof: []string{"daemon.TestInstanceVolumeKeepsDataAcrossRunsOnTheSameHost", "daemon.TestInstanceVolumeMountsIntoADockerJobAtItsPath", "daemon.TestEmbeddedLaptopModeMountsAnyPathButItsDataDir", "daemon.TestKubernetesVolumeIsAClaimThatItsRunsMount"},
		Refuse:     map[fieldTarget]refusal{targetBackend: refuseHostOnlyOnBackend("instance volumes and gpud host volumes are mounted by gpud's agent on a host", "mount only volumes of the backend (type: volume, backend: kubernetes), or drop volumes")},
		RefuseWhen: volumesNeedAHost},
	"volumes.instance_path": {Proof: []string{"daemon.TestInstanceVolumeKeepsDataAcrossRunsOnTheSameHost", "daemon.TestInstanceVolumeAttacksAreRefusedWithTheField", "daemon.TestRegisteredHostMountsOnlyUnderItsAllowVolumePrefix"}, Check: checkVolumeHostPath},
	"volumes.path":          {Proof: []string{"daemon.TestInstanceVolumeMountsIntoADockerJobAtItsPath", "daemon.TestInstanceVolumeKeepsDataAcrossRunsOnTheSameHost", "daemon.TestManagedVolumeSharesDataBetweenRunsOnDocker", "daemon.TestManagedVolumeOnProcessOnlyHostsIsRefusedByItsPath"}, Check: checkVolumePath},
	"volumes.optional":      {Proof: []string{"daemon.TestOptionalInstanceVolumeIsSkippedWhereTheHostDoesNotAllowIt"}, Note: noteOptionalVolumes},
	// Managed volumes (`type: volume` on a gpud host backend); daemon/volumes_managed*.go.
	"volumes.name": {Proof: []string{"daemon.TestManagedVolumeSharesDataBetweenRunsOnDocker", "daemon.TestManagedVolumeKeepsItsRunsOnItsHost", "daemon.TestManagedVolumePerNodeFollowsEachNodeToItsHost", "daemon.TestManagedVolumeAttacksAreRefused", "daemon.TestKubernetesVolumeIsAClaimThatItsRunsMount", "daemon.TestKubernetesVolumeBadInputIsRefusedAndLosesNothing"}, Check: checkManagedVolumeName, Note: noteManagedVolumes},
	// repos and files: the client packs them (internal/upload), the server
	// keeps the archive and pushes it to the job's agent, which unpacks it
	// into the job's working directory (daemon/uploads.go).
	"repos": {Proof: []string{"daemon.TestFilesAndReposArriveInTheJobsWorkingDir", "daemon.TestFilesAndReposArriveInADockerJobsWorkingDir"},
		Refuse: map[fieldTarget]refusal{targetBackend: refuseHostOnlyOnBackend("the run's repos are uploaded to, or cloned by, gpud's agent on the host", "bake the code into the image")}},
	"repos.local_path": {Proof: []string{"daemon.TestFilesAndReposArriveInTheJobsWorkingDir"}},
	"repos.path": {Proof: []string{"daemon.TestFilesAndReposArriveInTheJobsWorkingDir", "daemon.TestFilesAndReposArriveAtAbsolutePathsInADockerJob"},
		Check: checkUploadPath, Refuse: refuseUploadTargetOnProcess, RefuseWhen: uploadTargetOutside},
	"repos.url":    {Proof: []string{"daemon.TestRepoURLIsClonedIntoTheJobsWorkingDir", "daemon.TestPrivateRepoURLTakesItsTokenFromASecret"}, Check: checkRepoURL},
	"repos.branch": {Proof: []string{"daemon.TestRepoURLIsClonedIntoTheJobsWorkingDir"}, Check: checkRepoRef},
	"repos.hash":   {Proof: []string{"daemon.TestRepoURLIsClonedIntoTheJobsWorkingDir"}, Check: checkRepoRef},
	"repos.if_exists": {All: &refusal{Why: "each job gets a fresh working directory, so a repo never finds its path taken",
		Instead: "drop if_exists"}},
	"files": {Proof: []string{"daemon.TestFilesAndReposArriveInTheJobsWorkingDir", "daemon.TestFilesAndReposArriveInADockerJobsWorkingDir"},
		Refuse: map[fieldTarget]refusal{targetBackend: refuseHostOnlyOnBackend("the run's files are uploaded to gpud's agent on the host", "bake the files into the image")}},
	"files.local_path": {Proof: []string{"daemon.TestFilesAndReposArriveInTheJobsWorkingDir"}},
	"files.path": {Proof: []string{"daemon.TestFilesAndReposArriveInTheJobsWorkingDir", "daemon.TestFilesAndReposArriveAtAbsolutePathsInADockerJob"},
		Check: checkUploadPath, Refuse: refuseUploadTargetOnProcess, RefuseWhen: uploadTargetOutside},

	"priority":    {Proof: []string{"daemon.TestReapplyWithANewPriorityUpdatesTheRunInPlace"}},
	"queue":       {Proof: []string{"daemon.TestQueuesShareAndReclaimThroughTheAPI"}},
	"preemptible": {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},

	"utilization_policy": {Subtree: true, Proof: []string{"daemon.TestUtilizationPolicyStopsARunWithIdleGPUs"},
		Refuse: map[fieldTarget]refusal{targetBackend: refuseHostOnlyOnBackend("GPU utilization is sampled by gpud's agent on the host", "drop utilization_policy")}},
	"schedule": {Subtree: true, Proof: []string{"daemon.TestCronScheduleResubmitsAtEachTick"}},

	// Tasks.
	"task:nodes": {Proof: []string{"daemon.TestSSHClusterRunsATwoNodeTaskWhoseNodesReachEachOther"},
		Refuse: map[fieldTarget]refusal{targetBackend: {Why: "an elastic gang (nodes: MIN..MAX) grows node by node, and a job backend starts a gang's jobs once, all together",
			Instead: "give nodes one number to run on a job backend, or run on the project's hosts"}},
		RefuseWhen: func(fc *fieldCheck, _ string) bool { return fc.cfg.Task != nil && fc.cfg.Task.Elastic() }},
	"task:startup_order": {Proof: []string{"daemon.TestStartupOrderStartsTheFirstNodesFirst"},
		Refuse: map[fieldTarget]refusal{targetBackend: {Why: "a job backend starts a gang's jobs all at once, with one StartGang", Instead: "run on the project's hosts, or drop startup_order and let the workers wait for the master"}}},
	"task:stop_criteria": {Proof: []string{"daemon.TestStopCriteriaMasterDoneStopsTheWorkers"}},
	"task:ports": {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"},
		Refuse: map[fieldTarget]refusal{targetBackend: refuseHostOnlyOnBackend("a task's ports are forwarded through gpud's agent on the host", "drop ports")}},
	"task:groups":          {Proof: []string{"daemon.TestTaskGroupsRunTheirOwnCommands"}},
	"task:groups.name":     {Proof: []string{"daemon.TestTaskGroupsRunTheirOwnCommands"}},
	"task:groups.nodes":    {Proof: []string{"daemon.TestTaskGroupsRunTheirOwnCommands"}},
	"task:groups.image":    {Proof: []string{"daemon.TestTaskGroupsRunTheirOwnCommands"}},
	"task:groups.env":      {Proof: []string{"daemon.TestTaskGroupsRunTheirOwnCommands"}},
	"task:groups.commands": {Proof: []string{"daemon.TestTaskGroupsRunTheirOwnCommands"}},
	"task:groups.python": {All: &refusal{Why: "a group's own python is not applied yet",
		Instead: "set python for the whole run, or give the group an image with that Python"}},
	"task:groups.ports": {All: &refusal{Why: "a group's own ports are not published yet",
		Instead: "list the ports under the task's ports"}},

	// Dev environments.
	"dev-environment:init":                {Proof: []string{"daemon.TestDevEnvironmentStopsAfterInactivity"}},
	"dev-environment:ports":               {Proof: []string{"daemon.TestDevEnvironmentStopsAfterInactivity", "internal/e2e.TestAttachForwardsPortsToLocalhost"}},
	"dev-environment:inactivity_duration": {Proof: []string{"daemon.TestDevEnvironmentStopsAfterInactivity", "internal/e2e.TestSSHReachesTheDevEnvironmentThroughTheServer"}},
	"dev-environment:ide":                 {Proof: []string{"internal/e2e.TestSSHReachesTheDevEnvironmentThroughTheServer", "internal/e2e.TestSSHReachesADockerDevEnvironmentsContainer", "daemon.TestSSHReachesADevEnvironmentOnAnSSHFleetHost", "daemon.TestSSHReachesADevEnvironmentOnARegisteredHost"}},
	"dev-environment:version": {All: &refusal{Why: "gpud installs no IDE server into the environment: the IDE installs its own over SSH on the first connection, at the version it needs",
		Instead: "drop version; open the ide link once `gpud ssh-config RUN` wrote the SSH entry"}},
}
