module sandboxwire

go 1.19
