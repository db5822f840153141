module gocl

go 1.26
