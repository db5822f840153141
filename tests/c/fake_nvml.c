/* fake_nvml.c — a stand-in libnvidia-ml.so.1 for libgocl's NVML reader
 * (capi/nvml.c), so tests/python/test_nvml_shim.py runs without a GPU.
 * It defines only the functions libgocl looks up, with NVML's ABI.
 *
 *   gcc -O2 -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 tests/c/fake_nvml.c \
 *       -o build/fake-nvml/libnvidia-ml.so.1      (make build/fake-nvml/libnvidia-ml.so.1)
 *
 * Put its directory first in LD_LIBRARY_PATH. nvmlInit_v2 reads:
 *   FAKE_NVML_GPUS     "name|cc|brand|busid;..." e.g.
 *                      "NVIDIA RTX PRO 6000 Blackwell Workstation Edition|12.0|13|00000000:41:00.0"
 *                      (default: no GPUs)
 *   FAKE_NVML_P2P      the nvmlGpuP2PStatus_t of every pair of distinct GPUs (default 0, OK)
 *   FAKE_NVML_P2P_RC   what nvmlDeviceGetP2PStatus returns (default 0, success)
 *   FAKE_NVML_DRIVER   driver version (default "580.82.07")
 *   FAKE_NVML_CUDA     CUDA driver version (default 13000)
 *   FAKE_NVML_INIT_RC  nvmlInit_v2's return code (default 0); nonzero: init fails
 *   FAKE_NVML_UTIL     per GPU, in order, "gpu,memory;..." percents for nvmlDeviceGetUtilizationRates
 *                      (default 0,0)
 *   FAKE_NVML_MEM      per GPU, in order, "usedMiB,totalMiB;..." for nvmlDeviceGetMemoryInfo
 *                      (default 0,81920)
 * Any function other than nvmlInit_v2 called without a successful init
 * (before one, after a failed one, or after the last nvmlShutdown) calls
 * abort(): the reader must never do that, and the crash makes it visible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUCCESS 0
#define ERR_INVALID_ARGUMENT 2
#define ERR_INSUFFICIENT_SIZE 7

#define MAX_GPUS 64

typedef struct {
  char name[96];
  int major, minor;
  int brand;
  char bus_id[32];
  unsigned int domain, bus, device;
  unsigned int util_gpu, util_mem;
  unsigned long long mem_used, mem_total; /* bytes */
} fake_gpu;

/* nvmlPciInfo_t's layout, written out here on its own. */
typedef struct {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} fake_pci_info;

/* nvmlUtilization_t's and nvmlMemory_t's layouts. */
typedef struct {
  unsigned int gpu, memory;
} fake_utilization;

typedef struct {
  unsigned long long total, free, used;
} fake_memory;

static fake_gpu gpus[MAX_GPUS];
static int ngpus;
static int inits; /* successful nvmlInit_v2 calls not yet shut down */
static int p2p_status, p2p_rc, cuda_version;
static char driver_version[80];

static void need_init(const char* fn) {
  if (inits <= 0) {
    fprintf(stderr, "fake libnvidia-ml: %s called without a successful nvmlInit_v2\n", fn);
    abort();
  }
}

static int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v != NULL && *v != '\0' ? atoi(v) : def;
}

static int copy_out(const char* s, char* buf, unsigned int len) {
  if (buf == NULL) return ERR_INVALID_ARGUMENT;
  if (strlen(s) + 1 > len) return ERR_INSUFFICIENT_SIZE;
  memcpy(buf, s, strlen(s) + 1);
  return SUCCESS;
}

/* parse_gpu reads "name|cc|brand|busid" (brand and busid may be absent). */
static void parse_gpu(char* entry) {
  if (ngpus >= MAX_GPUS || *entry == '\0') return;
  fake_gpu* g = &gpus[ngpus++];
  memset(g, 0, sizeof(*g));
  char* field[4] = {entry, NULL, NULL, NULL};
  for (int i = 1; i < 4; i++) {
    char* bar = field[i - 1] != NULL ? strchr(field[i - 1], '|') : NULL;
    if (bar != NULL) {
      *bar = '\0';
      field[i] = bar + 1;
    }
  }
  snprintf(g->name, sizeof(g->name), "%s", field[0]);
  if (field[1] != NULL) sscanf(field[1], "%d.%d", &g->major, &g->minor);
  if (field[2] != NULL) g->brand = atoi(field[2]);
  if (field[3] != NULL) {
    snprintf(g->bus_id, sizeof(g->bus_id), "%s", field[3]);
    sscanf(g->bus_id, "%x:%x:%x", &g->domain, &g->bus, &g->device);
  }
}

static fake_gpu* device(void* handle, const char* fn) {
  need_init(fn);
  fake_gpu* g = handle;
  if (g < gpus || g >= gpus + ngpus) {
    fprintf(stderr, "fake libnvidia-ml: %s got a handle it never gave out\n", fn);
    abort();
  }
  return g;
}

int nvmlInit_v2(void) {
  int rc = env_int("FAKE_NVML_INIT_RC", 0);
  if (rc != 0) return rc;
  if (inits++ > 0) return SUCCESS; /* configured by the first init */
  ngpus = 0;
  const char* spec = getenv("FAKE_NVML_GPUS");
  if (spec != NULL) {
    char* copy = strdup(spec);
    char* save = NULL;
    for (char* e = strtok_r(copy, ";", &save); e != NULL; e = strtok_r(NULL, ";", &save)) parse_gpu(e);
    free(copy);
  }
  for (int i = 0; i < ngpus; i++) gpus[i].mem_total = 81920ULL << 20;
  const char* util = getenv("FAKE_NVML_UTIL");
  if (util != NULL) {
    char* copy = strdup(util);
    char* save = NULL;
    int i = 0;
    for (char* e = strtok_r(copy, ";", &save); e != NULL && i < ngpus; e = strtok_r(NULL, ";", &save), i++)
      sscanf(e, "%u,%u", &gpus[i].util_gpu, &gpus[i].util_mem);
    free(copy);
  }
  const char* mem = getenv("FAKE_NVML_MEM");
  if (mem != NULL) {
    char* copy = strdup(mem);
    char* save = NULL;
    int i = 0;
    for (char* e = strtok_r(copy, ";", &save); e != NULL && i < ngpus; e = strtok_r(NULL, ";", &save), i++) {
      unsigned long long used = 0, total = 0;
      if (sscanf(e, "%llu,%llu", &used, &total) == 2) {
        gpus[i].mem_used = used << 20;
        gpus[i].mem_total = total << 20;
      }
    }
    free(copy);
  }
  p2p_status = env_int("FAKE_NVML_P2P", 0);
  p2p_rc = env_int("FAKE_NVML_P2P_RC", 0);
  cuda_version = env_int("FAKE_NVML_CUDA", 13000);
  const char* drv = getenv("FAKE_NVML_DRIVER");
  snprintf(driver_version, sizeof(driver_version), "%s", drv != NULL ? drv : "580.82.07");
  return SUCCESS;
}

int nvmlShutdown(void) {
  need_init("nvmlShutdown");
  inits--;
  return SUCCESS;
}

int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  need_init("nvmlSystemGetDriverVersion");
  return copy_out(driver_version, version, length);
}

int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  need_init("nvmlSystemGetCudaDriverVersion_v2");
  if (version == NULL) return ERR_INVALID_ARGUMENT;
  *version = cuda_version;
  return SUCCESS;
}

int nvmlSystemGetCudaDriverVersion(int* version) {
  need_init("nvmlSystemGetCudaDriverVersion");
  return nvmlSystemGetCudaDriverVersion_v2(version);
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  need_init("nvmlDeviceGetCount_v2");
  if (count == NULL) return ERR_INVALID_ARGUMENT;
  *count = (unsigned int)ngpus;
  return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** handle) {
  need_init("nvmlDeviceGetHandleByIndex_v2");
  if (handle == NULL || index >= (unsigned int)ngpus) return ERR_INVALID_ARGUMENT;
  *handle = &gpus[index];
  return SUCCESS;
}

int nvmlDeviceGetName(void* dev, char* name, unsigned int length) {
  return copy_out(device(dev, "nvmlDeviceGetName")->name, name, length);
}

int nvmlDeviceGetCudaComputeCapability(void* dev, int* major, int* minor) {
  fake_gpu* g = device(dev, "nvmlDeviceGetCudaComputeCapability");
  if (major == NULL || minor == NULL) return ERR_INVALID_ARGUMENT;
  *major = g->major;
  *minor = g->minor;
  return SUCCESS;
}

int nvmlDeviceGetPciInfo_v3(void* dev, fake_pci_info* pci) {
  fake_gpu* g = device(dev, "nvmlDeviceGetPciInfo_v3");
  if (pci == NULL) return ERR_INVALID_ARGUMENT;
  memset(pci, 0, sizeof(*pci));
  snprintf(pci->bus_id, sizeof(pci->bus_id), "%s", g->bus_id);
  snprintf(pci->bus_id_legacy, sizeof(pci->bus_id_legacy), "%04x:%02x:%02x.0", g->domain & 0xffff, g->bus & 0xff,
           g->device & 0xff);
  pci->domain = g->domain;
  pci->bus = g->bus;
  pci->device = g->device;
  pci->pci_device_id = 0x2bb110de; /* any value: libgocl does not read it */
  pci->pci_subsystem_id = 0x204b10de;
  return SUCCESS;
}

int nvmlDeviceGetBrand(void* dev, int* brand) {
  fake_gpu* g = device(dev, "nvmlDeviceGetBrand");
  if (brand == NULL) return ERR_INVALID_ARGUMENT;
  *brand = g->brand;
  return SUCCESS;
}

int nvmlDeviceGetP2PStatus(void* dev1, void* dev2, int caps_index, int* status) {
  fake_gpu* a = device(dev1, "nvmlDeviceGetP2PStatus");
  fake_gpu* b = device(dev2, "nvmlDeviceGetP2PStatus");
  if (status == NULL || a == b || caps_index < 0 || caps_index > 4) return ERR_INVALID_ARGUMENT;
  if (p2p_rc != SUCCESS) return p2p_rc;
  *status = p2p_status;
  return SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void* dev, fake_utilization* u) {
  fake_gpu* g = device(dev, "nvmlDeviceGetUtilizationRates");
  if (u == NULL) return ERR_INVALID_ARGUMENT;
  u->gpu = g->util_gpu;
  u->memory = g->util_mem;
  return SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void* dev, fake_memory* m) {
  fake_gpu* g = device(dev, "nvmlDeviceGetMemoryInfo");
  if (m == NULL) return ERR_INVALID_ARGUMENT;
  m->total = g->mem_total;
  m->used = g->mem_used;
  m->free = g->mem_total - g->mem_used;
  return SUCCESS;
}
