package shm

const sysMemfdCreate = 279

const sysProcessVMReadv = 270
