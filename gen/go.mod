module github.com/conch-sh/conch/gen

go 1.26.8
