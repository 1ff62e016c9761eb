/*
 * pause: the sandbox ("infra") container of every Pod on the test node.
 * It holds the Pod's namespaces open, reaps zombies and exits on SIGINT or
 * SIGTERM. No registry is reachable from the tests, so
 * internal/testcluster compiles this with `gcc -static` and imports it as
 * registry.k8s.io/pause:3.10 (the sandbox image containerd is configured
 * with) instead of pulling the upstream image.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void sigdown(int signo) {
  (void)signo;
  exit(0);
}

static void sigreap(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction a = {0};
  a.sa_handler = sigdown;
  if (sigaction(SIGINT, &a, NULL) < 0 || sigaction(SIGTERM, &a, NULL) < 0)
    return 1;
  a.sa_handler = sigreap;
  a.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &a, NULL) < 0)
    return 1;
  for (;;)
    pause();
  return 1;
}
