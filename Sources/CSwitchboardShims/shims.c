#include "CSwitchboardShims.h"
int switchboard_shims_version(void) { return 1; }
