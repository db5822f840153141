package shm

const sysMemfdCreate = 279
