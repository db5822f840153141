package shm

const sysMemfdCreate = 319
