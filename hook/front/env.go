package front

// DisableEnv, set to anything in the hook's environment, turns the front
// off: every stage starts the Go hook (for comparisons and tests).
const DisableEnv = "SFORGE_HOOK_NO_FRONT"
