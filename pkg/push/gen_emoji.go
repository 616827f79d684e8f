//go:build ignore

// gen_emoji writes emoji_table.go from internal/emojigen/emoji-data.txt:
//
//	go generate ./pkg/push
package main

import (
	"log"
	"os"

	"github.com/campus-it/ucs/pkg/push/internal/emojigen"
)

func main() {
	src, err := emojigen.Source(emojigen.Data)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("emoji_table.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
